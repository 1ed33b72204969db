// Drives a real `spool` binary through its OpenCode-compatible API with the official
// `@opencode-ai/sdk` clients, both the root client and the `/v2` client, the way an
// OpenCode client would: create a session, prompt it asynchronously, read the global
// event stream until the session is idle, answer a permission and the agent's question,
// abort a long run, prompt while a run is busy (queued), list the messages, fork, revert
// and unrevert (the files too). The text a client assembles from streamed deltas must equal the text
// the server stored.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test, before } from "node:test"
import assert from "node:assert/strict"
import { readFile } from "node:fs/promises"
import path from "node:path"
import { createHash } from "node:crypto"
import { execFile } from "node:child_process"
import { promisify } from "node:util"
import { createOpencodeClient } from "@opencode-ai/sdk"
import { createOpencodeClient as createOpencodeClientV2 } from "@opencode-ai/sdk/v2"
import { BIN, WAIT_MS, startSpool, workspace } from "../support/spool.mjs"

// Each test's project is a fresh directory of `work`; Spool registers it on first use.
const work = workspace("spool-opencode-")
let baseUrl
const run = promisify(execFile)

before(async () => {
  ;({ baseUrl } = await work.serve())
})

/**
 * Reads an SDK event stream in the background and lets a test wait for events.
 * `events` keeps everything received, in order.
 */
function watch(subscription, controller) {
  const events = []
  let wake = () => {}
  let failure
  const reading = (async () => {
    try {
      for await (const event of subscription.stream) {
        events.push(event)
        wake()
      }
    } catch (error) {
      if (!controller.signal.aborted) failure = error
    }
    wake()
  })()
  return {
    events,
    /** The first event at or after `from` for which `pred` holds. */
    async waitFor(pred, from = 0, what = "event") {
      const deadline = Date.now() + WAIT_MS
      for (let i = from; ; ) {
        for (; i < events.length; i++) if (pred(events[i])) return { event: events[i], index: i }
        if (failure) throw failure
        const left = deadline - Date.now()
        if (left <= 0) {
          const seen = events.slice(from).map((e) => e.type).join(", ")
          throw new Error(`no ${what} within ${WAIT_MS} ms; saw: ${seen}`)
        }
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, 250))
          wake = () => {
            clearTimeout(timer)
            resolve()
          }
        })
      }
    },
    async close() {
      controller.abort()
      await reading
    },
  }
}

const of = (sessionID) => (e) =>
  (e.properties?.sessionID ?? e.properties?.part?.sessionID ?? e.properties?.info?.sessionID) === sessionID

const idle = (sessionID) => (e) => e.type === "session.idle" && e.properties.sessionID === sessionID

/** Text of each message, assembled the way a linear client does: from `message.part.delta`. */
function textFromDeltas(events, sessionID) {
  const byMessage = new Map()
  for (const e of events) {
    if (e.type !== "message.part.delta" || e.properties.sessionID !== sessionID) continue
    assert.equal(e.properties.field, "text")
    const parts = byMessage.get(e.properties.messageID) ?? new Map()
    parts.set(e.properties.partID, (parts.get(e.properties.partID) ?? "") + e.properties.delta)
    byMessage.set(e.properties.messageID, parts)
  }
  return byMessage
}

/** Text of a stored message's text parts, in part order. */
function storedText(message) {
  return message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("")
}

/** The streamed text of one message: its text parts' deltas, in part-id order. */
function streamedText(byMessage, message) {
  const parts = byMessage.get(message.info.id) ?? new Map()
  const textParts = new Set(message.parts.filter((p) => p.type === "text").map((p) => p.id))
  return [...parts.entries()]
    .filter(([id]) => textParts.has(id))
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([, text]) => text)
    .join("")
}

test("root client: prompt, stream until idle, answer a permission, abort, list messages", async () => {
  const directory = await work.project("root")
  const client = createOpencodeClient({ baseUrl, directory, throwOnError: true })

  const { data: session } = await client.session.create({ body: { title: "root client" } })
  assert.match(session.id, /^ses_/)
  assert.equal(session.directory, directory)
  assert.equal(session.title, "root client")

  const controller = new AbortController()
  const feed = watch(await client.event.subscribe({ signal: controller.signal }), controller)
  try {
    await feed.waitFor((e) => e.type === "server.connected", 0, "server.connected")

    // 1. A prompt, streamed as deltas until the session is idle.
    const text = "hello from the root client, with ünïcode 🌍 too"
    const sent = await client.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: `echo: ${text}` }] },
    })
    assert.equal(sent.response.status, 204)
    const done = await feed.waitFor(idle(session.id), 0, "session.idle")
    const mine = feed.events.slice(0, done.index + 1).filter(of(session.id))
    const types = mine.map((e) => e.type)
    assert.ok(types.indexOf("session.status") < types.indexOf("message.part.delta"), types.join(","))
    const finish = mine.find((e) => e.type === "message.part.updated" && e.properties.part.type === "step-finish")
    assert.equal(finish.properties.part.reason, "stop")
    assert.equal(typeof finish.properties.part.cost, "number")
    assert.equal(typeof finish.properties.part.tokens.output, "number")

    let { data: messages } = await client.session.messages({ path: { id: session.id } })
    assert.deepEqual(
      messages.map((m) => m.info.role),
      ["user", "assistant"],
    )
    const answer = messages[1]
    assert.equal(storedText(answer), text)
    assert.equal(streamedText(textFromDeltas(feed.events, session.id), answer), storedText(answer))
    assert.equal(answer.info.parentID, messages[0].info.id)
    assert.deepEqual(
      answer.parts.map((p) => p.type),
      ["step-start", "text", "step-finish"],
    )

    // 2. A tool call that asks: answered through the root client's permission route.
    const from = feed.events.length
    await client.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: 'tool: write {"path":"x.txt","content":"hi"}' }] },
    })
    const asked = await feed.waitFor((e) => e.type === "permission.updated" && of(session.id)(e), from, "permission")
    const permission = asked.event.properties
    assert.match(permission.id, /^per_/)
    assert.equal(permission.type, "write")
    assert.equal(permission.pattern, "x.txt")
    const pendingTool = feed.events
      .slice(from)
      .find((e) => e.type === "message.part.updated" && e.properties.part.type === "tool")
    assert.equal(pendingTool.properties.part.state.status, "pending")
    const { data: ok } = await client.postSessionIdPermissionsPermissionId({
      path: { id: session.id, permissionID: permission.id },
      body: { response: "once" },
    })
    assert.equal(ok, true)
    const settled = await feed.waitFor(idle(session.id), asked.index, "session.idle after the permission")
    const replied = feed.events.slice(asked.index, settled.index).find((e) => e.type === "permission.replied")
    assert.equal(replied.properties.permissionID, permission.id)
    assert.equal(replied.properties.response, "once")
    const toolStates = feed.events
      .slice(from, settled.index)
      .filter((e) => e.type === "message.part.updated" && e.properties.part.type === "tool")
      .map((e) => e.properties.part.state.status)
    assert.deepEqual([...new Set(toolStates)], ["pending", "running", "completed"])
    assert.equal(await readFile(path.join(directory, "x.txt"), "utf8"), "hi")

    // 3. A long run, aborted while it streams.
    const beforeAbort = feed.events.length
    await client.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: "stream: 5000" }] },
    })
    await feed.waitFor((e) => e.type === "message.part.delta" && of(session.id)(e), beforeAbort, "a delta")
    const { data: aborted } = await client.session.abort({ path: { id: session.id } })
    assert.equal(aborted, true)
    const stopped = await feed.waitFor(idle(session.id), beforeAbort, "session.idle after abort")
    const error = feed.events.slice(beforeAbort, stopped.index).find((e) => e.type === "session.error")
    assert.equal(error.properties.error.name, "MessageAbortedError")

    ;({ data: messages } = await client.session.messages({ path: { id: session.id } }))
    const last = messages.at(-1)
    assert.equal(last.info.role, "assistant")
    assert.equal(last.info.error.name, "MessageAbortedError")
    const partial = storedText(last)
    assert.ok(partial.startsWith("w1"), partial.slice(0, 40))
    assert.ok(!partial.endsWith(" w5000"), "the run was cut short")
    // Every assistant message's streamed text equals its stored text.
    const streamed = textFromDeltas(feed.events, session.id)
    for (const m of messages.filter((m) => m.info.role === "assistant")) {
      assert.equal(streamedText(streamed, m), storedText(m), `message ${m.info.id}`)
    }
    const { data: limited } = await client.session.messages({ path: { id: session.id }, query: { limit: 2 } })
    assert.deepEqual(
      limited.map((m) => m.info.id),
      messages.slice(-2).map((m) => m.info.id),
    )
  } finally {
    await feed.close()
  }
})

test("root client: seed 004's per-token message.part.updated with ?deltas=legacy", async () => {
  const directory = await work.project("legacy")
  const client = createOpencodeClient({ baseUrl, directory, throwOnError: true })
  const { data: session } = await client.session.create({ body: {} })
  const controller = new AbortController()
  const feed = watch(
    await client.event.subscribe({ signal: controller.signal, query: { deltas: "legacy" } }),
    controller,
  )
  try {
    await feed.waitFor((e) => e.type === "server.connected")
    await client.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: "echo: one two three four" }] },
    })
    const done = await feed.waitFor(idle(session.id), 0, "session.idle")
    let assembled = ""
    let lastSnapshot = ""
    for (const e of feed.events.slice(0, done.index)) {
      if (e.type !== "message.part.updated" || e.properties.part.type !== "text") continue
      if (typeof e.properties.delta === "string") {
        assembled += e.properties.delta
        lastSnapshot = e.properties.part.text
        assert.equal(lastSnapshot, assembled, "part.text is the text so far")
      }
    }
    assert.equal(assembled, "one two three four")
    const { data: messages } = await client.session.messages({ path: { id: session.id } })
    assert.equal(storedText(messages.at(-1)), assembled)
  } finally {
    await feed.close()
  }
})

test("v2 client: health, sessions, prompt, permission reply, abort, messages", async () => {
  const directory = await work.project("v2")
  const client = createOpencodeClientV2({ baseUrl, directory, throwOnError: true })

  const { data: health } = await client.global.health()
  assert.equal(health.healthy, true)
  assert.equal(typeof health.version, "string")

  const { data: session } = await client.session.create({ title: "v2 client" })
  assert.match(session.id, /^ses_/)
  const controller = new AbortController()
  const feed = watch(await client.event.subscribe({}, { signal: controller.signal }), controller)
  try {
    await feed.waitFor((e) => e.type === "server.connected")
    assert.equal(typeof feed.events[0].id, "string", "v2 events carry an id")

    // 1. Prompt and stream.
    const text = "the v2 client streams this sentence word by word"
    await client.session.promptAsync({ sessionID: session.id, parts: [{ type: "text", text: `echo: ${text}` }] })
    const busy = await feed.waitFor(
      (e) => e.type === "session.status" && of(session.id)(e) && e.properties.status.type === "busy",
      0,
      "busy",
    )
    const done = await feed.waitFor(idle(session.id), busy.index, "session.idle")
    const statusIdle = feed.events
      .slice(busy.index, done.index)
      .find((e) => e.type === "session.status" && e.properties.status.type === "idle")
    assert.ok(statusIdle, "session.status idle comes before session.idle")

    const { data: messages } = await client.session.messages({ sessionID: session.id })
    const answer = messages.at(-1)
    assert.equal(answer.info.role, "assistant")
    assert.equal(answer.info.finish, "stop")
    assert.ok(answer.info.time.completed >= answer.info.time.created)
    assert.equal(storedText(answer), text)
    assert.equal(streamedText(textFromDeltas(feed.events, session.id), answer), text)

    const { data: status } = await client.session.status()
    assert.equal(status[session.id], undefined, "an idle session is not listed as busy")
    const { data: listed } = await client.session.list()
    assert.ok(listed.some((s) => s.id === session.id))
    const { data: renamed } = await client.session.update({ sessionID: session.id, title: "renamed" })
    assert.equal(renamed.title, "renamed")
    await feed.waitFor(
      (e) => e.type === "session.updated" && e.properties.info.id === session.id && e.properties.info.title === "renamed",
      done.index,
      "session.updated",
    )

    // 2. A permission, answered with v2's reply route.
    const from = feed.events.length
    await client.session.promptAsync({
      sessionID: session.id,
      parts: [{ type: "text", text: 'tool: write {"path":"v2.txt","content":"from v2"}' }],
    })
    const asked = await feed.waitFor((e) => e.type === "permission.asked" && of(session.id)(e), from, "permission.asked")
    const request = asked.event.properties
    assert.equal(request.permission, "write")
    assert.deepEqual(request.patterns, ["v2.txt"])
    assert.match(request.tool.messageID, /^msg_/)
    const { data: pending } = await client.permission.list()
    assert.deepEqual(
      pending.map((p) => p.id),
      [request.id],
    )
    const { data: ok } = await client.permission.reply({ requestID: request.id, reply: "always" })
    assert.equal(ok, true)
    const settled = await feed.waitFor(idle(session.id), asked.index, "idle after the reply")
    const replied = feed.events.slice(asked.index, settled.index).find((e) => e.type === "permission.replied")
    assert.equal(replied.properties.requestID, request.id)
    assert.equal(replied.properties.reply, "always")
    assert.equal(await readFile(path.join(directory, "v2.txt"), "utf8"), "from v2")
    const { data: none } = await client.permission.list()
    assert.deepEqual(none, [])
    // `always` allowed the tool for this session.
    const { data: after } = await client.session.get({ sessionID: session.id })
    assert.ok(after.permission.some((r) => r.permission === "write" && r.action === "allow"))

    // 3. Abort a long run.
    const beforeAbort = feed.events.length
    await client.session.promptAsync({ sessionID: session.id, parts: [{ type: "text", text: "stream: 5000" }] })
    await feed.waitFor((e) => e.type === "message.part.delta" && of(session.id)(e), beforeAbort, "a delta")
    const { data: busyNow } = await client.session.status()
    assert.equal(busyNow[session.id]?.type, "busy")
    await client.session.abort({ sessionID: session.id })
    await feed.waitFor(idle(session.id), beforeAbort, "idle after abort")

    const { data: all } = await client.session.messages({ sessionID: session.id })
    const streamed = textFromDeltas(feed.events, session.id)
    for (const m of all.filter((m) => m.info.role === "assistant")) {
      assert.equal(streamedText(streamed, m), storedText(m), `message ${m.info.id}`)
    }
    const tool = all.flatMap((m) => m.parts).find((p) => p.type === "tool")
    assert.equal(tool.state.status, "completed")
    assert.deepEqual(tool.state.input, { path: "v2.txt", content: "from v2" })

    // 4. A blocking prompt answers with the run's last assistant message.
    const { data: reply } = await client.session.prompt({
      sessionID: session.id,
      parts: [{ type: "text", text: "echo: blocking answer" }],
    })
    assert.equal(reply.info.role, "assistant")
    assert.equal(storedText(reply), "blocking answer")

    // 5. Errors keep OpenCode's shape.
    const missing = await createOpencodeClientV2({ baseUrl, directory }).session.get({
      sessionID: "ses_00000000000000000000000000",
    })
    assert.equal(missing.response.status, 404)
    assert.equal(missing.error.name, "NotFoundError")

    const { data: deleted } = await client.session.delete({ sessionID: session.id })
    assert.equal(deleted, true)
    await feed.waitFor(
      (e) => e.type === "session.deleted" && e.properties.info.id === session.id,
      0,
      "session.deleted",
    )
  } finally {
    await feed.close()
  }
})

test("both clients: the agent's todo list as todo.updated and session.todo", async () => {
  const directory = await work.project("todos")
  const root = createOpencodeClient({ baseUrl, directory, throwOnError: true })
  const v2 = createOpencodeClientV2({ baseUrl, directory, throwOnError: true })
  const { data: session } = await root.session.create({ body: { title: "todos" } })
  const controller = new AbortController()
  const feed = watch(await v2.event.subscribe({}, { signal: controller.signal }), controller)
  try {
    await feed.waitFor((e) => e.type === "server.connected")
    const todos = [
      { content: "Read the code", status: "completed", priority: "high" },
      { content: "Write the tool", status: "in_progress" },
    ]
    await root.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: `tool: todo_write ${JSON.stringify({ todos })}` }] },
    })
    const { event } = await feed.waitFor((e) => e.type === "todo.updated" && of(session.id)(e), 0, "todo.updated")
    const expected = [
      { content: "Read the code", status: "completed", priority: "high", id: "1" },
      { content: "Write the tool", status: "in_progress", priority: "medium", id: "2" },
    ]
    assert.deepEqual(event.properties.todos, expected)
    await feed.waitFor(idle(session.id), 0, "session.idle")
    const { data: fromRoot } = await root.session.todo({ path: { id: session.id } })
    assert.deepEqual(fromRoot, expected)
    const { data: fromV2 } = await v2.session.todo({ sessionID: session.id })
    assert.deepEqual(fromV2, expected)
  } finally {
    await feed.close()
  }
})

test("v2 client: the agent's question, answered with one of its options", async () => {
  const directory = await work.project("questions")
  const client = createOpencodeClientV2({ baseUrl, directory, throwOnError: true })
  const { data: session } = await client.session.create({ title: "questions" })
  const controller = new AbortController()
  const feed = watch(await client.event.subscribe({}, { signal: controller.signal }), controller)
  try {
    await feed.waitFor((e) => e.type === "server.connected")
    const args = {
      question: "Which colour should the button be?",
      options: [{ label: "red" }, { label: "blue", description: "like the sky" }],
    }
    await client.session.promptAsync({
      sessionID: session.id,
      parts: [{ type: "text", text: `tool: question ${JSON.stringify(args)}` }],
    })
    const asked = await feed.waitFor((e) => e.type === "question.asked" && of(session.id)(e), 0, "question.asked")
    const request = asked.event.properties
    assert.deepEqual(request.questions, [
      {
        question: "Which colour should the button be?",
        header: "question",
        options: [
          { label: "red", description: "" },
          { label: "blue", description: "like the sky" },
        ],
        multiple: false,
        custom: true,
      },
    ])
    assert.match(request.tool.messageID, /^msg_/)
    assert.equal(typeof request.tool.callID, "string")
    assert.ok(
      !feed.events.some((e) => e.type === "permission.asked" && of(session.id)(e)),
      "a question is not a permission",
    )
    const { data: pending } = await client.question.list()
    assert.deepEqual(
      pending.map((q) => q.id),
      [request.id],
    )
    const { data: permissions } = await client.permission.list()
    assert.deepEqual(permissions, [])

    const { data: ok } = await client.question.reply({ requestID: request.id, answers: [["blue"]] })
    assert.equal(ok, true)
    const settled = await feed.waitFor(idle(session.id), asked.index, "idle after the answer")
    const replied = feed.events.slice(asked.index, settled.index).find((e) => e.type === "question.replied")
    assert.deepEqual(replied.properties, { sessionID: session.id, requestID: request.id, answers: [["blue"]] })
    const { data: messages } = await client.session.messages({ sessionID: session.id })
    assert.equal(storedText(messages.at(-1)), "Tool question returned 1 line: The person answered: blue")
    const { data: none } = await client.question.list()
    assert.deepEqual(none, [])

    // A question is answered once: OpenCode no longer knows a replied one.
    const again = await createOpencodeClientV2({ baseUrl, directory }).question.reply({
      requestID: request.id,
      answers: [["red"]],
    })
    assert.equal(again.response.status, 404)
    assert.equal(again.error._tag, "QuestionNotFoundError")
    assert.equal(again.error.requestID, request.id)

    // Dismissing a question stops the run, as OpenCode's reject does.
    const from = feed.events.length
    await client.session.promptAsync({
      sessionID: session.id,
      parts: [{ type: "text", text: 'tool: question {"question":"What should the file be called?"}' }],
    })
    const open = await feed.waitFor((e) => e.type === "question.asked" && of(session.id)(e), from, "question.asked")
    assert.deepEqual(open.event.properties.questions[0].options, [])
    const { data: rejected } = await client.question.reject({ requestID: open.event.properties.id })
    assert.equal(rejected, true)
    const stopped = await feed.waitFor(idle(session.id), open.index, "idle after the reject")
    const dismissed = feed.events.slice(open.index, stopped.index).find((e) => e.type === "question.rejected")
    assert.deepEqual(dismissed.properties, { sessionID: session.id, requestID: open.event.properties.id })
  } finally {
    await feed.close()
  }
})

test("both clients: a prompt while a run is busy is queued and runs after it", async () => {
  const directory = await work.project("queue")
  const root = createOpencodeClient({ baseUrl, directory, throwOnError: true })
  const v2 = createOpencodeClientV2({ baseUrl, directory, throwOnError: true })
  const { data: session } = await root.session.create({ body: { title: "queue" } })
  const controller = new AbortController()
  const feed = watch(await v2.event.subscribe({}, { signal: controller.signal }), controller)
  try {
    await feed.waitFor((e) => e.type === "server.connected")
    await v2.session.promptAsync({ sessionID: session.id, parts: [{ type: "text", text: "stream: 400" }] })
    await feed.waitFor((e) => e.type === "message.part.delta" && of(session.id)(e), 0, "a delta")

    // While the long run streams: one prompt sent asynchronously, one that waits.
    const queued = await root.session.promptAsync({
      path: { id: session.id },
      body: { parts: [{ type: "text", text: "echo: queued first" }] },
    })
    assert.equal(queued.response.status, 204)
    const { data: reply } = await v2.session.prompt({
      sessionID: session.id,
      parts: [{ type: "text", text: "echo: queued second" }],
    })
    assert.equal(reply.info.role, "assistant")
    assert.equal(reply.info.error, undefined)
    assert.equal(storedText(reply), "queued second")

    const { data: messages } = await v2.session.messages({ sessionID: session.id })
    assert.deepEqual(
      messages.map((m) => [m.info.role, m.info.role === "user" ? storedText(m) : storedText(m).split(" ").at(-1)]),
      [
        ["user", "stream: 400"],
        ["assistant", "w400"],
        ["user", "echo: queued first"],
        ["assistant", "first"],
        ["user", "echo: queued second"],
        ["assistant", "second"],
      ],
    )
    assert.ok(
      messages.every((m) => m.info.error === undefined),
      "no run failed",
    )
    assert.ok(!feed.events.some((e) => e.type === "session.error" && of(session.id)(e)))
  } finally {
    await feed.close()
  }
})

test("fork, revert and unrevert through the SDK", async () => {
  const directory = await work.project("time-travel", { "notes.txt": "before\n" })
  const notes = path.join(directory, "notes.txt")
  const root = createOpencodeClient({ baseUrl, directory, throwOnError: true })
  const v2 = createOpencodeClientV2({ baseUrl, directory, throwOnError: true })
  const { data: session } = await v2.session.create({ title: "time travel" })
  await v2.session.update({ sessionID: session.id, permission: [{ permission: "write", pattern: "*", action: "allow" }] })
  await v2.session.prompt({ sessionID: session.id, parts: [{ type: "text", text: "echo: first" }] })
  const write = JSON.stringify({ path: "notes.txt", content: "after\n" })
  await v2.session.prompt({ sessionID: session.id, parts: [{ type: "text", text: `tool: write ${write}` }] })
  assert.equal(await readFile(notes, "utf8"), "after\n")

  const history = async () => (await v2.session.messages({ sessionID: session.id })).data
  const shape = (messages) => messages.map((m) => [m.info.id, m.info.role])
  const before = await history()
  const users = before.filter((m) => m.info.role === "user")
  assert.equal(users.length, 2)
  // The write's step: the first assistant message of the second turn.
  const step = before.find((m) => m.info.role === "assistant" && m.info.parentID === users[1].info.id)
  assert.ok(step, "the second turn has an assistant message")
  const firstTurn = before.filter((m) => m.info.id < users[1].info.id)

  // A fork at an assistant message holds the turns before its own.
  const { data: fork } = await root.session.fork({ path: { id: session.id }, body: { messageID: step.info.id } })
  assert.notEqual(fork.id, session.id)
  const { data: forked } = await v2.session.messages({ sessionID: fork.id })
  assert.deepEqual(
    forked.map((m) => [m.info.role, storedText(m)]),
    firstTurn.map((m) => [m.info.role, storedText(m)]),
  )

  // Revert from the write's step: its whole turn leaves, and the file is as before it.
  const { data: reverted } = await v2.session.revert({ sessionID: session.id, messageID: step.info.id })
  assert.equal(reverted.revert?.messageID, users[1].info.id)
  assert.equal(await readFile(notes, "utf8"), "before\n")
  assert.deepEqual(shape(await history()), shape(firstTurn))
  const { data: read } = await root.session.get({ path: { id: session.id } })
  assert.equal(read.revert?.messageID, users[1].info.id, "the session shows its pending revert")

  // Unrevert: the turn and the file are back.
  const { data: restored } = await root.session.unrevert({ path: { id: session.id } })
  assert.equal(restored.revert, undefined)
  assert.equal(await readFile(notes, "utf8"), "after\n")
  assert.deepEqual(shape(await history()), shape(before))
  const { data: again } = await v2.session.unrevert({ sessionID: session.id })
  assert.equal(again.revert, undefined, "nothing pending: the session as it is")
})

test("root client: a file part (a data URL) reaches the model and comes back as a file part whose URL gives the bytes to the token; a file:// URL is refused", async () => {
  // Auth on, as a server anyone else can reach has it: a token made before it starts.
  const dataDir = await work.project("files-data")
  const { stdout } = await run(BIN, ["token", "create", "--user", "alice", "--data-dir", dataDir])
  const auth = { authorization: `Bearer ${stdout.trim()}` }
  const directory = await work.project("files")
  const server = await startSpool(dataDir, ["--workspace-root", path.dirname(directory)])
  try {
    const client = createOpencodeClient({ baseUrl: server.baseUrl, directory, headers: auth })
    const { data: session } = await client.session.create({ body: { title: "files" } })
    const controller = new AbortController()
    const feed = watch(await client.event.subscribe({ signal: controller.signal }), controller)
    await feed.waitFor((e) => e.type === "server.connected", 0, "server.connected")
    const log = Buffer.from("line one\n")
    const file = { type: "file", mime: "text/plain", filename: "app.log", url: `data:text/plain;base64,${log.toString("base64")}` }
    const { data: answer, response } = await client.session.prompt({
      path: { id: session.id },
      body: { parts: [file, { type: "text", text: "echo: seen" }] },
    })
    assert.equal(response.status, 200)
    const sha = createHash("sha256").update(log).digest("hex")
    assert.equal(storedText(answer), `Received app.log (text/plain, 9 bytes, sha256 ${sha.slice(0, 8)}…, bytes match)\nseen`)

    // The history holds the prompt as OpenCode holds one: its file part, then its text.
    const { data: messages } = await client.session.messages({ path: { id: session.id } })
    const user = messages.find((m) => m.info.role === "user")
    assert.deepEqual(user.parts.map((p) => p.type), ["file", "text"])
    const [part] = user.parts
    assert.deepEqual(
      { mime: part.mime, filename: part.filename, sessionID: part.sessionID, messageID: part.messageID },
      { mime: "text/plain", filename: "app.log", sessionID: session.id, messageID: user.info.id },
    )
    // Spool's own URL, relative to the server: the token gets the bytes back, nobody else.
    assert.match(part.url, /^\/api\/attachments\/att_/)
    const url = new URL(part.url, server.baseUrl)
    const fetched = await fetch(url, { headers: auth })
    assert.equal(fetched.status, 200)
    assert.deepEqual(Buffer.from(await fetched.arrayBuffer()), log)
    assert.equal((await fetch(url)).status, 401)

    // `/event` announced the same part with the user message.
    const live = await feed.waitFor(
      (e) => e.type === "message.part.updated" && e.properties.part.type === "file",
      0,
      "the file part",
    )
    assert.deepEqual(live.event.properties.part, part)
    await feed.close()

    const local = { ...file, url: "file:///home/me/app.log" }
    const refused = await client.session.prompt({ path: { id: session.id }, body: { parts: [local, { type: "text", text: "look" }] } })
    assert.equal(refused.response.status, 400)
    assert.equal(refused.error.error.code, "unsupported_file_url")
  } finally {
    await server.stop()
  }
})
