// Drives a real `spool` binary through its AG-UI endpoint with `@ag-ui/client`'s own
// HttpAgent, as an AG-UI frontend uses it: messages are added to the agent, `runAgent`
// posts them and applies the event stream (the package verifies every event against
// the protocol on the way), interrupts come back in `agent.pendingInterrupts` and are
// answered with `resume`. What the agent holds must equal what the server stored.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test, before } from "node:test"
import assert from "node:assert/strict"
import { createHash, randomUUID } from "node:crypto"
import { readFile, access } from "node:fs/promises"
import path from "node:path"
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client"
import { WAIT_MS, workspace } from "../support/spool.mjs"

const work = workspace("spool-ag-ui-")
let baseUrl
let api
let projectId
let projectDir

before(async () => {
  const files = { "README.md": "# Demo\n\nA project for the AG-UI test.\n" }
  ;({ baseUrl, api, projectId, projectDir } = await work.serveWithProject("data", { files }))
})

// The README's example: an HttpAgent pointed at Spool. Its thread id (a UUID by
// default) names a Spool session, made on the first run in forwardedProps.projectId.
function spoolAgent() {
  return new HttpAgent({
    url: `${baseUrl}/api/ag-ui`,
    // With a token: headers: { Authorization: `Bearer ${token}` },
  })
}

// The README's re-attaching agent. Spool numbers every event of a run's stream (its SSE
// `id:`, `N`, or `<approval id>:N` in the continuation after an interrupt); this agent
// notes the id of each event it applies, and `connectAgent()`
// follows the run it last followed from the event after that one
// (`GET /api/ag-ui/runs/:runId/events` with `Last-Event-ID`).
class ReattachingAgent extends HttpAgent {
  runId
  lastEventId = 0
  #ids = [] // the ids of the events read and not yet applied, in order

  constructor(config) {
    super({ ...config, fetch: (url, init) => this.#noteIds(url, init) })
    this.subscribe({
      onRunStartedEvent: ({ event }) => {
        this.runId = event.runId
      },
      onEvent: () => {
        const id = this.#ids.shift()
        if (id != null) this.lastEventId = id
      },
    })
  }

  connect() {
    const url = `${this.url}/runs/${this.runId}/events?threadId=${encodeURIComponent(this.threadId)}`
    const headers = { ...this.headers, Accept: "text/event-stream", "Last-Event-ID": String(this.lastEventId) }
    this.abortController = new AbortController()
    const request = () => this.fetch(url, { headers, signal: this.abortController.signal })
    return transformHttpEventStream(runHttpRequest(request))
  }

  async #noteIds(url, init) {
    const ids = (this.#ids = [])
    const res = await fetch(url, init)
    if (!res.ok || !res.body) return res
    const decoder = new TextDecoder()
    let rest = ""
    const noting = new TransformStream({
      transform(chunk, out) {
        rest += decoder.decode(chunk, { stream: true })
        const blocks = rest.split("\n\n")
        rest = blocks.pop()
        for (const block of blocks.filter((b) => /^data:/m.test(b))) ids.push(block.match(/^id: (.+)$/m)?.[1] ?? null)
        out.enqueue(chunk)
      },
    })
    return new Response(res.body.pipeThrough(noting), { status: res.status, headers: res.headers })
  }
}

// The README's answer to a run that stopped at approvals: one resume entry per
// pending interrupt.
function answerAll(agent, payload) {
  return agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload }))
}

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text })
}

/** Runs the agent and returns the events it applied, in order. */
async function run(agent, parameters = {}) {
  const events = []
  await agent.runAgent({ forwardedProps: { projectId }, ...parameters }, { onEvent: ({ event }) => events.push(event) })
  return events
}

const types = (events) => events.map((e) => e.type)

/** The events' types without the ones whose place is not fixed: a session's title
 * comes from a model call of its own, whenever that call ends. */
const shape = (events) =>
  types(events.filter((e) => !(e.type === "STATE_DELTA" && e.delta.every((op) => op.path === "/title"))))
    .filter((t, i, all) => t !== "TEXT_MESSAGE_CONTENT" || all[i - 1] !== "TEXT_MESSAGE_CONTENT")

const assistantText = (messages) =>
  messages
    .filter((m) => m.role === "assistant" && typeof m.content === "string")
    .map((m) => m.content)
    .join("")

/** The run a stream was for, and the stored assistant text after its prompt. */
async function stored(runId) {
  const run = await api("GET", `/api/runs/${runId}`)
  const page = await api("GET", `/api/sessions/${run.sessionId}/messages`)
  const after = page.messages.filter((m) => m.index > run.userMessageIndex)
  const text = after
    .filter((m) => m.role === "assistant")
    .map((m) => m.content.filter((c) => c.type === "text").map((c) => c.text).join(""))
    .join("")
  return { run, text, messages: after }
}

test("streamed text is the stored answer, and a second run continues the same session", async () => {
  const agent = spoolAgent()
  say(agent, "echo: hello big wide world")
  const events = await run(agent)
  assert.deepEqual(shape(events), [
    "RUN_STARTED",
    "STATE_SNAPSHOT",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_CONTENT",
    "TEXT_MESSAGE_END",
    "RUN_FINISHED",
  ])
  const started = events[0]
  assert.match(started.runId, /^run_/, "the run is Spool's")
  assert.equal(started.threadId, agent.threadId)
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  assert.equal(assistantText(agent.messages), "hello big wide world")
  const first = await stored(started.runId)
  assert.equal(assistantText(agent.messages), first.text)
  assert.equal(agent.state.sessionId, first.run.sessionId, "STATE_SNAPSHOT names the session")

  // The README's middleware for long threads: only the last user message (and the tool
  // messages after it) is sent.
  const posted = []
  agent.use((input, next) => {
    const messages = input.messages.slice(input.messages.findLastIndex((m) => m.role === "user"))
    posted.push(messages)
    return next.run({ ...input, messages })
  })
  say(agent, "echo: again")
  const second = await run(agent)
  assert.deepEqual(posted.map((m) => m.map((x) => x.content)), [["echo: again"]])
  const { run: again } = await stored(second[0].runId)
  assert.equal(again.sessionId, first.run.sessionId, "the thread id names one session")
  assert.notEqual(again.id, first.run.id)
  assert.equal(assistantText(agent.messages), "hello big wide worldagain")
})

test("a Spool session id is a thread id: the agent continues that session", async () => {
  const session = await api("POST", "/api/sessions", { projectId })
  const agent = new HttpAgent({ url: `${baseUrl}/api/ag-ui`, threadId: session.id })
  say(agent, "echo: into an existing session")
  await agent.runAgent()
  assert.equal(assistantText(agent.messages), "into an existing session")
  const page = await api("GET", `/api/sessions/${session.id}/messages`)
  assert.deepEqual(page.messages.map((m) => m.role), ["user", "assistant"])
})

test("a tool call arrives as TOOL_CALL_* events with its result", async () => {
  const agent = spoolAgent()
  say(agent, 'tool: read {"path":"README.md"}')
  const events = await run(agent)
  const calls = events.filter((e) => e.type === "TOOL_CALL_START")
  assert.equal(calls.length, 1, JSON.stringify(types(events)))
  assert.equal(calls[0].toolCallName, "read")
  const id = calls[0].toolCallId
  const own = events.filter((e) => e.toolCallId === id).map((e) => e.type)
  assert.deepEqual(own.filter((t, i) => t !== own[i - 1]), [
    "TOOL_CALL_START",
    "TOOL_CALL_ARGS",
    "TOOL_CALL_END",
    "TOOL_CALL_RESULT",
  ])
  const holder = agent.messages.find((m) => m.toolCalls?.some((c) => c.id === id))
  const call = holder.toolCalls.find((c) => c.id === id)
  assert.deepEqual(JSON.parse(call.function.arguments), { path: "README.md" })
  const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === id)
  assert.match(result.content, /A project for the AG-UI test/)
  const { text, messages } = await stored(events[0].runId)
  const storedResult = messages.find((m) => m.role === "toolResult")
  assert.equal(result.content, storedResult.content.map((c) => c.text).join(""))
  assert.equal(assistantText(agent.messages), text)
  assert.notEqual(text, "")
})

/** Asks to write `file` (which needs a person's approval) and returns the interrupt. */
async function askToWrite(agent, file) {
  say(agent, `tool: write ${JSON.stringify({ path: file, content: "written through AG-UI" })}`)
  const events = await run(agent)
  const finished = events.at(-1)
  assert.equal(finished.type, "RUN_FINISHED")
  assert.equal(finished.outcome.type, "interrupt", JSON.stringify(finished))
  assert.equal(agent.pendingInterrupts.length, 1)
  const [interrupt] = agent.pendingInterrupts
  assert.match(interrupt.id, /^per_/)
  assert.equal(interrupt.reason, "tool_approval")
  assert.equal(interrupt.metadata.spool.tool, "write")
  const call = events.find((e) => e.type === "TOOL_CALL_START" && e.toolCallId === interrupt.toolCallId)
  assert.equal(call?.toolCallName, "write", "the call was announced before the interrupt")
  await assert.rejects(access(path.join(projectDir, file)), "nothing is written before the decision")
  return { runId: events[0].runId, interrupt }
}

test("an approval round trip: the interrupt is answered, the run continues and the call runs once", async () => {
  const agent = spoolAgent()
  const { runId, interrupt } = await askToWrite(agent, "approved.txt")
  const resume = answerAll(agent, { approved: true })
  assert.deepEqual(resume, [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }])
  const events = await run(agent, { resume })
  assert.equal(events[0].type, "RUN_STARTED")
  assert.equal(events[0].runId, runId, "the continuation is the same Spool run")
  const resolved = events.find((e) => e.type === "CUSTOM" && e.name === "spool.approval_resolved")
  assert.equal(resolved.value.approvalId, interrupt.id)
  assert.equal(resolved.value.decision, "once")
  const result = events.find((e) => e.type === "TOOL_CALL_RESULT")
  assert.equal(result.toolCallId, interrupt.toolCallId)
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  assert.deepEqual(agent.pendingInterrupts, [])
  assert.equal(await readFile(path.join(projectDir, "approved.txt"), "utf8"), "written through AG-UI")

  // The same answer again (a retried request) gets the continuation again, and the
  // call does not run twice; another answer to the decided interrupt is refused.
  const input = {
    threadId: agent.threadId,
    runId: randomUUID(),
    messages: agent.messages,
    tools: [],
    context: [],
    forwardedProps: {},
  }
  const retried = await fetch(`${baseUrl}/api/ag-ui`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({ ...input, resume }),
  })
  assert.equal(retried.status, 200)
  assert.match(await retried.text(), /"outcome":\{"type":"success"\}/)
  const other = await fetch(`${baseUrl}/api/ag-ui`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...input, resume: answerAll({ pendingInterrupts: [interrupt] }, { approved: false }) }),
  })
  assert.equal(other.status, 409, await other.clone().text())
  const { run: settled, messages } = await stored(runId)
  assert.equal(settled.status, "completed")
  assert.equal(messages.filter((m) => m.role === "toolResult" && m.toolCallId === interrupt.toolCallId).length, 1)
  assert.equal(assistantText(agent.messages), (await stored(runId)).text)
})

// Presence comes on a timer, so Spool sends it unnumbered (no `id:`): a terminal that
// joins while the run waits reaches the continuation as a `CUSTOM` `spool.presence`,
// which the agent's event checks accept inside the run and hand to `onCustomEvent`.
test("a view joining while the run waits reaches the continuation as a spool.presence event", async () => {
  const agent = spoolAgent()
  const { runId } = await askToWrite(agent, "presence.txt")
  const { sessionId } = await api("GET", `/api/runs/${runId}`)
  const terminal = new AbortController()
  await fetch(`${baseUrl}/api/sessions/${sessionId}/events?approvals=1&client=cli`, { signal: terminal.signal })
  try {
    // The server announces the counts once they settle; the session's state says when.
    const deadline = Date.now() + WAIT_MS
    while ((await api("GET", `/api/sessions/${sessionId}`)).state.presence?.clients?.cli !== 1) {
      assert.ok(Date.now() < deadline, "the terminal is counted in time")
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    const events = await run(agent, { resume: answerAll(agent, { approved: true }) })
    const heard = events.filter((e) => e.type === "CUSTOM" && e.name === "spool.presence").map((e) => e.value)
    assert.ok(heard.some((p) => p.clients?.cli === 1 && p.viewers >= 1), JSON.stringify(heard))
    assert.deepEqual(events.at(-1).outcome, { type: "success" })
  } finally {
    terminal.abort()
  }
})

test("an approval round trip: denied, the call never runs and the model is told why", async () => {
  const agent = spoolAgent()
  const { runId, interrupt } = await askToWrite(agent, "denied.txt")
  const events = await run(agent, { resume: answerAll(agent, { approved: false, reason: "not this file" }) })
  const resolved = events.find((e) => e.type === "CUSTOM" && e.name === "spool.approval_resolved")
  assert.equal(resolved.value.decision, "reject")
  assert.equal(resolved.value.message, "not this file")
  const result = events.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === interrupt.toolCallId)
  assert.match(result.content, /not this file/)
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  await assert.rejects(access(path.join(projectDir, "denied.txt")))
  const { run: settled } = await stored(runId)
  assert.equal(settled.status, "completed")
})

test("a question is an interrupt answered with the person's words, once", async () => {
  const agent = spoolAgent()
  const question = { question: "Which colour?", options: [{ label: "red" }, { label: "blue", description: "like the sky" }] }
  say(agent, `tool: question ${JSON.stringify(question)}`)
  const asked = await run(agent)
  assert.equal(asked.at(-1).outcome?.type, "interrupt", JSON.stringify(asked.at(-1)))
  const [interrupt] = agent.pendingInterrupts
  assert.equal(interrupt.reason, "question")
  assert.equal(interrupt.message, "Which colour?")
  assert.deepEqual(interrupt.responseSchema.required, ["answer"])
  assert.deepEqual(interrupt.responseSchema.properties.answer.examples, ["red", "blue"])
  assert.deepEqual(interrupt.metadata.spool.card.options, [
    { label: "red", description: null },
    { label: "blue", description: "like the sky" },
  ])
  const call = asked.find((e) => e.type === "TOOL_CALL_START" && e.toolCallId === interrupt.toolCallId)
  assert.equal(call?.toolCallName, "question")

  // An answer of one's own, not one of the options.
  const resume = [{ interruptId: interrupt.id, status: "resolved", payload: { answer: "green" } }]
  const events = await run(agent, { resume })
  assert.equal(events[0].runId, asked[0].runId, "the continuation is the same Spool run")
  const resolved = events.find((e) => e.type === "CUSTOM" && e.name === "spool.approval_resolved")
  assert.equal(resolved.value.decision, "fill")
  const result = events.find((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === interrupt.toolCallId)
  assert.equal(result.content, "The person answered: green")
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  assert.match(assistantText(agent.messages), /Tool question returned 1 line: The person answered: green/)
  assert.deepEqual(agent.pendingInterrupts, [])

  // The same answer again gets the continuation again; another answer is refused.
  const input = { threadId: agent.threadId, runId: randomUUID(), messages: [], tools: [], context: [], forwardedProps: {} }
  const post = (resume) =>
    fetch(`${baseUrl}/api/ag-ui`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...input, resume }),
    })
  const retried = await post(resume)
  assert.equal(retried.status, 200, await retried.clone().text())
  assert.match(await retried.text(), /"outcome":\{"type":"success"\}/)
  const other = await post([{ ...resume[0], payload: { answer: "red" } }])
  assert.equal(other.status, 409, await other.clone().text())
  const { run: settled, messages } = await stored(asked[0].runId)
  assert.equal(settled.status, "completed")
  assert.equal(messages.filter((m) => m.role === "toolResult").length, 1, "answered once")
})

test("an answer is refused for an interrupt that is no question", async () => {
  const agent = spoolAgent()
  const { interrupt } = await askToWrite(agent, "not-a-question.txt")
  const res = await fetch(`${baseUrl}/api/ag-ui`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      threadId: agent.threadId,
      runId: randomUUID(),
      messages: [],
      tools: [],
      context: [],
      forwardedProps: {},
      resume: [{ interruptId: interrupt.id, status: "resolved", payload: { answer: "yes" } }],
    }),
  })
  assert.equal(res.status, 400)
  assert.equal((await res.json()).error.code, "not_a_question")
  await assert.rejects(access(path.join(projectDir, "not-a-question.txt")), "nothing was decided")
})

// The README's frontend tool: declared in `tools`, run by the client when the run
// finishes with it pending, its result a `tool` message the next run posts.
const getLocation = {
  name: "get_location",
  description: "The city the person is in",
  parameters: { type: "object", properties: {} },
}

test("a frontend tool runs in the client, across a server restart, and its result is taken once", async () => {
  const first = await work.serveWithProject("tools")
  const agent = new HttpAgent({ url: `${first.baseUrl}/api/ag-ui` })
  say(agent, "tool: get_location {}")
  let pending
  const asked = []
  await agent.runAgent(
    { tools: [getLocation], forwardedProps: { projectId: first.projectId } },
    {
      onEvent: ({ event }) => asked.push(event),
      onRunFinishedEvent: ({ pendingToolCallIds }) => {
        pending = pendingToolCallIds
      },
    },
  )
  const call = asked.find((e) => e.type === "TOOL_CALL_START")
  assert.equal(call?.toolCallName, "get_location", JSON.stringify(types(asked)))
  assert.deepEqual(asked.at(-1).outcome, { type: "success", pendingToolCallIds: [call.toolCallId] })
  assert.deepEqual(pending, [call.toolCallId], "the agent is told which call is its to run")
  assert.ok(!asked.some((e) => e.type === "TOOL_CALL_RESULT"), "nothing ran it on the server")
  const runId = asked[0].runId
  assert.equal((await first.api("GET", `/api/runs/${runId}`)).status, "interrupted")

  // The server stops while the client runs the tool, and starts again on its data.
  await first.stop()
  const server = await work.serve("tools")
  agent.url = `${server.baseUrl}/api/ag-ui`
  agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.toolCallId, content: "Lisbon" })
  const answered = structuredClone(agent.messages)
  const rest = []
  await agent.runAgent({ tools: [getLocation] }, { onEvent: ({ event }) => rest.push(event) })
  assert.deepEqual(types(rest).slice(0, 2), ["RUN_STARTED", "STATE_SNAPSHOT"])
  assert.equal(rest[0].runId, runId, "the same Spool run goes on")
  // The client holds its own result: the stream does not send it back (@ag-ui/client
  // would append it as a second tool message).
  assert.ok(!rest.some((e) => e.type === "TOOL_CALL_RESULT"), JSON.stringify(types(rest)))
  const toolMessages = agent.messages.filter((m) => m.role === "tool" && m.toolCallId === call.toolCallId)
  assert.equal(toolMessages.length, 1, "one tool message for the call in the agent's messages")
  assert.deepEqual(rest.at(-1).outcome, { type: "success" })
  assert.match(assistantText(agent.messages), /Tool get_location returned 1 line: Lisbon/)

  // The same messages again: no second result, no second prompt.
  const again = await fetch(`${server.baseUrl}/api/ag-ui`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({
      threadId: agent.threadId,
      runId: randomUUID(),
      messages: answered,
      tools: [getLocation],
      context: [],
      forwardedProps: {},
    }),
  })
  assert.equal(again.status, 200)
  assert.match(await again.text(), /"outcome":\{"type":"success"\}/)
  const run = await server.api("GET", `/api/runs/${runId}`)
  assert.equal(run.status, "completed")
  const page = await server.api("GET", `/api/sessions/${run.sessionId}/messages`)
  const results = page.messages.filter((m) => m.role === "toolResult")
  assert.equal(results.length, 1, "one result")
  assert.deepEqual(results[0].content.map((c) => c.text), ["Lisbon"])
  assert.equal(page.messages.filter((m) => m.role === "user").length, 1, "one prompt")
})

/** Polls the run until `done(run)` holds (the server settles an abort on its own time). */
async function waitForRun(runId, done) {
  const deadline = Date.now() + WAIT_MS
  for (;;) {
    const run = await api("GET", `/api/runs/${runId}`)
    if (done(run)) return run
    assert.ok(Date.now() < deadline, `run ${runId} is still ${run.status}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

test("a client aborted mid-run re-attaches and ends with the stored answer", async () => {
  const agent = new ReattachingAgent({ url: `${baseUrl}/api/ag-ui` })
  say(agent, "stream: 400")
  let contents = 0
  await agent.runAgent(
    { forwardedProps: { projectId } },
    {
      onTextMessageContentEvent: () => {
        contents += 1
        if (contents === 3) agent.abortRun()
      },
    },
  )
  assert.match(agent.runId, /^run_/)
  const had = assistantText(agent.messages)
  assert.ok(had.split(" ").length < 400, "the client left before the end")
  // The run goes on without it; the agent comes back and reads the rest.
  const events = []
  await agent.connectAgent({ forwardedProps: { projectId } }, { onEvent: ({ event }) => events.push(event) })
  assert.deepEqual(types(events).slice(0, 3), ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"])
  assert.equal(events.at(-1).type, "RUN_FINISHED")
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  const { run, text } = await stored(agent.runId)
  assert.equal(run.status, "completed")
  assert.equal(text.split(" ").length, 400)
  assert.equal(assistantText(agent.messages), text, "every word once")
})

test("a client aborted mid-continuation re-attaches after its last event, every word once", async () => {
  const agent = new ReattachingAgent({ url: `${baseUrl}/api/ag-ui` })
  const { runId, interrupt } = await askToWrite(agent, "reattached.txt")
  let contents = 0
  await agent.runAgent(
    { forwardedProps: { projectId }, resume: answerAll(agent, { approved: true }) },
    {
      onTextMessageContentEvent: () => {
        contents += 1
        if (contents === 2) agent.abortRun()
      },
    },
  )
  assert.match(String(agent.lastEventId), new RegExp(`^${interrupt.id}:\\d+$`), "numbered after its approval")
  const had = assistantText(agent.messages)
  // The agent holds the interrupt until a stream finishes: connecting names the answer
  // it sent (the re-attach itself sends nothing).
  const events = []
  const resume = answerAll(agent, { approved: true })
  await agent.connectAgent({ forwardedProps: { projectId }, resume }, { onEvent: ({ event }) => events.push(event) })
  assert.equal(events.at(-1).type, "RUN_FINISHED")
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  assert.deepEqual(agent.pendingInterrupts, [])
  assert.ok(!events.some((e) => e.type === "CUSTOM"), "the decision came once, before")
  const { run, text } = await stored(runId)
  assert.equal(run.status, "completed")
  assert.match(text, /^Tool write returned/)
  assert.ok(had.length < text.length, `the client left before the end: ${had}`)
  assert.equal(assistantText(agent.messages), text, "every word once")
})

test("abortRun() cancels the run when the request asked for it", async () => {
  const agent = spoolAgent()
  say(agent, "stream: 5000")
  let runId
  const contents = []
  await agent.runAgent(
    { forwardedProps: { projectId, onDisconnect: "cancel" } },
    {
      onRunStartedEvent: ({ event }) => {
        runId = event.runId
      },
      onTextMessageContentEvent: ({ event }) => {
        contents.push(event.delta)
        if (contents.length === 3) agent.abortRun()
      },
    },
  )
  assert.match(runId, /^run_/)
  assert.ok(contents.length >= 3)
  const run = await waitForRun(runId, (r) => r.status !== "running")
  assert.equal(run.status, "cancelled")
  const { text } = await stored(runId)
  assert.ok(text.split(" ").length < 5000, "the run stopped before its end")
})

test("bad requests are refused with a JSON error", async () => {
  const post = (body) =>
    fetch(`${baseUrl}/api/ag-ui`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    })
  const messages = [{ id: randomUUID(), role: "user", content: "echo: hi" }]
  const base = { runId: randomUUID(), tools: [], context: [], forwardedProps: { projectId } }
  for (const [body, status, code] of [
    [{ ...base, threadId: "../etc", messages }, 400, "invalid_thread_id"],
    [{ ...base, threadId: "x".repeat(129), messages }, 400, "invalid_thread_id"],
    [{ ...base, threadId: randomUUID(), messages, forwardedProps: {} }, 400, "missing_project"],
    [{ ...base, threadId: randomUUID(), messages: [] }, 400, "no_user_message"],
    [{ ...base, threadId: randomUUID(), messages, resume: [{ interruptId: "nope", status: "resolved" }] }, 400, "invalid_interrupt"],
    [{ ...base, threadId: "ses_01jd0000000000000000000001", messages }, 404, "not_found"],
  ]) {
    const res = await post(body)
    assert.equal(res.status, status, JSON.stringify(body))
    assert.equal((await res.json()).error.code, code)
  }
})

/** The scripted model's line for a file it got whole (issue 42). */
function received(name, mediaType, bytes) {
  const sha = createHash("sha256").update(bytes).digest("hex")
  return `Received ${name} (${mediaType}, ${bytes.length} bytes, sha256 ${sha.slice(0, 8)}…, bytes match)\n`
}

test("a user message's image and legacy binary parts reach the model", async () => {
  const agent = spoolAgent()
  const png = Buffer.from("89504e470d0a1a0a0000000d494844520000000100000001080600000000", "hex")
  const log = Buffer.from("line one\n")
  const content = [
    { type: "image", source: { type: "data", value: png.toString("base64"), mimeType: "image/png" }, metadata: { filename: "shot.png" } },
    { type: "binary", mimeType: "text/plain", data: log.toString("base64"), filename: "app.log" },
    { type: "text", text: "echo: seen" },
  ]
  agent.addMessage({ id: randomUUID(), role: "user", content })
  const events = await run(agent)
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  const want = received("shot.png", "image/png", png) + received("app.log", "text/plain", log) + "seen"
  assert.equal(assistantText(agent.messages), want)
  assert.equal((await stored(events[0].runId)).text, want)
})
