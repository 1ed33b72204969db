// Every event Spool's AG-UI endpoint sends, checked against `@ag-ui/core`'s own zod
// schemas (`EventSchemas`, the union of every event type's schema; issue 37: "a
// published schema that Spool's own events break is a failing test"). One scripted
// session goes through text, thinking, a bash call approved with its output, a write
// rejected, a question answered, plan mode's `exit_plan`, todos, the queue with a
// deleted prompt, a cancelled run and a title; a second server with a tiny answer limit
// fails a run. Every `data:` line of every response is collected raw and validated.
//
// The package's event schemas pass fields they do not declare through (Spool's
// `metadata.spool` on an interrupt, for one). Live tool output and git changes have no
// AG-UI event, so none is sent.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test } from "node:test"
import assert from "node:assert/strict"
import { randomUUID } from "node:crypto"
import { EventSchemas } from "@ag-ui/core/schemas"
import { WAIT_MS, workspace } from "../support/spool.mjs"

const work = workspace("spool-ag-ui-conformance-")

/** Reads an AG-UI response: every event in order, `onEvent` called with each as it arrives. */
async function eventsOf(res, onEvent = () => {}) {
  if (res.status !== 200) assert.fail(`${res.status}: ${await res.text()}`)
  assert.match(res.headers.get("content-type"), /^text\/event-stream/)
  const events = []
  const decoder = new TextDecoder()
  let buffered = ""
  for await (const bytes of res.body) {
    buffered += decoder.decode(bytes, { stream: true })
    let end
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, end)
      buffered = buffered.slice(end + 2)
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue
        const event = JSON.parse(line.slice("data: ".length))
        events.push(event)
        await onEvent(event)
      }
    }
  }
  assert.match(events.at(-1)?.type ?? "", /^RUN_(FINISHED|ERROR)$/, "the stream ends with the run's end")
  return events
}

/** A thread of one server: posts `RunAgentInput`s as `HttpAgent` does, keeps every event. */
function threadOn(spool, seen) {
  const threadId = randomUUID()
  const messages = []
  const post = async (extra, onEvent) => {
    const input = {
      threadId,
      runId: randomUUID(),
      messages,
      tools: [],
      context: [],
      state: {},
      forwardedProps: { projectId: spool.projectId },
      ...extra,
    }
    const res = await fetch(`${spool.baseUrl}/api/ag-ui`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(input),
    })
    const events = await eventsOf(res, onEvent)
    seen.push(...events)
    return events
  }
  return {
    threadId,
    /** Runs a prompt; the events of its stream. */
    send(text, onEvent) {
      messages.push({ id: randomUUID(), role: "user", content: text })
      return post({}, onEvent)
    },
    /** Runs a prompt that offers `tools`, the client's own. */
    sendWithTools(text, tools) {
      messages.push({ id: randomUUID(), role: "user", content: text })
      return post({ tools })
    },
    /** Answers the client call the stream `events` left pending with `content`. */
    toolResult(events, content, tools) {
      const [toolCallId] = events.at(-1).outcome.pendingToolCallIds
      messages.push({ id: randomUUID(), role: "tool", toolCallId, content })
      return post({ tools })
    },
    /** Answers the interrupt the stream `events` ended with. */
    resume(events, payload) {
      const interrupt = interruptOf(events)
      return post({ resume: [{ interruptId: interrupt.id, status: "resolved", payload }] })
    },
  }
}

/** The one interrupt a stream ended with. */
function interruptOf(events) {
  const end = events.at(-1)
  assert.equal(end.outcome?.type, "interrupt", JSON.stringify(end))
  assert.equal(end.outcome.interrupts.length, 1)
  return end.outcome.interrupts[0]
}

const succeeded = (events) => assert.equal(events.at(-1).outcome?.type, "success", JSON.stringify(events.at(-1)))

/** Everything one scripted session sends through the AG-UI endpoint. */
async function aWholeSession(spool) {
  const seen = []
  const thread = threadOn(spool, seen)

  // Untitled: the title the model proposes arrives as a `/title` STATE_DELTA.
  const first = await thread.send("think: weighing the options | the answer is here")
  const runId = first.find((e) => e.type === "RUN_STARTED").runId
  const session = (await spool.api("GET", `/api/runs/${runId}`)).sessionId

  let events = await thread.send(`tool: bash ${JSON.stringify({ command: "echo one; echo two" })}`)
  succeeded(await thread.resume(events, { approved: true }))

  events = await thread.send(`tool: write ${JSON.stringify({ path: "no.txt", content: "x" })}`)
  succeeded(await thread.resume(events, { approved: false, reason: "not this one" }))

  events = await thread.send(`tool: question ${JSON.stringify({ question: "Pick", options: [{ label: "A" }] })}`)
  assert.equal(interruptOf(events).reason, "question")
  succeeded(await thread.resume(events, { answer: "A" }))

  const todos = { todos: [{ content: "Read", status: "completed" }, { content: "Write", status: "pending" }] }
  succeeded(await thread.send(`tool: todo_write ${JSON.stringify(todos)}`))

  // A frontend tool: the run finishes with its call pending; the tool message goes on.
  const tools = [{ name: "get_location", description: "The city", parameters: { type: "object", properties: {} } }]
  events = await thread.sendWithTools("tool: get_location {}", tools)
  assert.equal(events.at(-1).outcome?.pendingToolCallIds?.length, 1, JSON.stringify(events.at(-1)))
  succeeded(await thread.toolResult(events, [{ type: "text", text: "Lisbon" }], tools))

  // A tool that fails: its result is an error.
  succeeded(await thread.send(`tool: read ${JSON.stringify({ path: "missing.txt" })}`))

  // The queue: a parked run, two prompts queued behind it, one removed; the kept one
  // runs after it.
  events = await thread.send(`tool: write ${JSON.stringify({ path: "a.txt", content: "x" })}`)
  const queued = []
  for (const text of ["echo: never", "echo: kept"]) {
    const body = await spool.api("POST", `/api/sessions/${session}/prompt`, { text, queue: true })
    queued.push(body.messageId)
  }
  await spool.api("DELETE", `/api/messages/${queued[0]}`)
  succeeded(await thread.resume(events, { approved: true }))
  // Idle alone is not enough: between the approved run's end and the kept prompt's run
  // the session is idle for a moment, and a prompt sent then is refused as busy. Wait
  // for the kept prompt's own answer, with nothing left in the queue.
  for (const deadline = Date.now() + WAIT_MS; ; ) {
    const { status, state } = await spool.api("GET", `/api/sessions/${session}`)
    const answered = JSON.stringify(state?.messages ?? []).includes('"text":"kept"')
    if (status === "idle" && answered && (state?.queue ?? []).length === 0) break
    assert.ok(Date.now() < deadline, `the kept prompt's run is still ${status}, answered: ${answered}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }

  // Plan mode: the plan asks through `exit_plan`, rejected here.
  await spool.api("PATCH", `/api/sessions/${session}`, { mode: "plan" })
  events = await thread.send(`tool: exit_plan ${JSON.stringify({ plan: "# Plan\n1. edit" })}`)
  succeeded(await thread.resume(events, { approved: false, reason: "not yet" }))
  await spool.api("PATCH", `/api/sessions/${session}`, { mode: "agent" })

  // A cancelled run: stopped while it streams.
  let stopping
  events = await thread.send("stream: 100000", (event) => {
    if (event.type === "TEXT_MESSAGE_CONTENT" && !stopping) {
      stopping = spool.api("POST", `/api/sessions/${session}/abort`, {})
    }
  })
  await stopping
  assert.equal(events.at(-1).outcome?.type, "cancelled", JSON.stringify(events.at(-1)))
  return seen
}

/** A run that fails: more answer than the server allows. */
async function aFailedRun(spool) {
  const seen = []
  const events = await threadOn(spool, seen).send("stream: 500")
  assert.equal(events.at(-1).type, "RUN_ERROR", JSON.stringify(events.at(-1)))
  return seen
}

test("every event Spool sends is an AG-UI event by @ag-ui/core's own schemas", async () => {
  const events = [
    ...(await aWholeSession(await work.serveWithProject("main"))),
    ...(await aFailedRun(await work.serveWithProject("small", { args: ["--max-answer-bytes", "64"] }))),
  ]
  const broken = []
  for (const event of events) {
    const result = EventSchemas.safeParse(event)
    if (!result.success) broken.push({ event, issues: result.error.issues })
  }
  assert.deepEqual(broken, [], "events @ag-ui/core's schemas refuse")

  // The scenario reached every event type Spool sends.
  const types = new Set(events.map((e) => e.type))
  for (const type of [
    "RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "STATE_SNAPSHOT", "STATE_DELTA", "CUSTOM",
    "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
    "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END",
    "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
  ]) {
    assert.ok(types.has(type), `no ${type} event was seen: ${[...types].join(", ")}`)
  }
  const paths = events.filter((e) => e.type === "STATE_DELTA").flatMap((e) => e.delta.map((op) => op.path))
  assert.ok(paths.includes("/title") && paths.includes("/todos"), `state deltas: ${paths}`)
})
