// Drives a real `spool` binary through its AI SDK endpoint with the `ai` package's own
// client pieces, as `useChat` uses them: `DefaultChatTransport` sends the chat's
// messages and reconnects to an active stream, `readUIMessageStream` assembles the UI
// message from the chunks. What a client assembles must equal what the server stored.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test, before } from "node:test"
import assert from "node:assert/strict"
import { readFile, access } from "node:fs/promises"
import path from "node:path"
import { createHash } from "node:crypto"
import {
  AbstractChat,
  DefaultChatTransport,
  readUIMessageStream,
  generateId,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai"
import { workspace } from "../support/spool.mjs"

const work = workspace("spool-ai-sdk-")
let baseUrl
let api
let projectId
let projectDir

before(async () => {
  const files = { "README.md": "# Demo\n\nA project for the AI SDK test.\n" }
  ;({ baseUrl, api, projectId, projectDir } = await work.serveWithProject("data", { files }))
})

// The README's example: the transport a `useChat` is given, pointed at Spool.
function spoolTransport() {
  return new DefaultChatTransport({
    api: `${baseUrl}/api/ai-sdk/chat`,
    // A chat id Spool has not seen starts a session in this project.
    body: { projectId },
    // With a token: headers: { Authorization: `Bearer ${token}` },
  })
}

/** The README's `sendAutomaticallyWhen`: resend once every approval is answered or
 * every question has its output. */
const answeredEverything = (chat) =>
  lastAssistantMessageIsCompleteWithApprovalResponses(chat) || lastAssistantMessageIsCompleteWithToolCalls(chat)

/**
 * The chat `useChat` wraps: the package's own `AbstractChat` with the plain state
 * `@ai-sdk/react` gives it, and a way to wait for what it does next. `changed()`
 * resolves on the next change of its messages, `finished()` on the end of the next
 * response.
 */
class Chat extends AbstractChat {
  constructor(init) {
    const listeners = { changed: [], finished: [] }
    const notify = (kind, value) => listeners[kind].splice(0).forEach((resolve) => resolve(value))
    const state = {
      status: "ready",
      error: undefined,
      messages: [],
      pushMessage(message) {
        this.messages = [...this.messages, message]
        notify("changed", this.messages)
      },
      popMessage() {
        this.messages = this.messages.slice(0, -1)
        notify("changed", this.messages)
      },
      replaceMessage(index, message) {
        this.messages = this.messages.map((m, i) => (i === index ? message : m))
        notify("changed", this.messages)
      },
      snapshot: (thing) => structuredClone(thing),
    }
    super({ ...init, state, onFinish: (finish) => notify("finished", finish) })
    this.listeners = listeners
  }

  changed() {
    return new Promise((resolve) => this.listeners.changed.push(resolve))
  }

  finished() {
    return new Promise((resolve) => this.listeners.finished.push(resolve))
  }

  /** The next end of a response that `wanted` accepts (`finishReason`, `message`, …). */
  async finishedWhen(wanted) {
    for (;;) {
      const finish = await this.finished()
      if (wanted(finish)) return finish
    }
  }
}

function userMessage(text) {
  return { id: generateId(), role: "user", parts: [{ type: "text", text }] }
}

/** Every message `readUIMessageStream` yields; the last is the assembled one. */
async function assemble(stream, message) {
  let last
  for await (const m of readUIMessageStream({ stream, message, onError: (e) => assert.fail(e) })) last = m
  return last
}

/** The chunks of a stream, in order, alongside the assembled message. */
function tap(stream) {
  const chunks = []
  return {
    chunks,
    stream: stream.pipeThrough(
      new TransformStream({
        transform(chunk, controller) {
          chunks.push(chunk)
          controller.enqueue(chunk)
        },
      }),
    ),
  }
}

const textOf = (message) =>
  message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("")

/** The stored assistant text of the run a UI message stands for (its id is the run id),
 * read through `via` (another server's `api`). */
async function storedAnswer(runId, via = api) {
  const run = await via("GET", `/api/runs/${runId}`)
  const page = await via("GET", `/api/sessions/${run.sessionId}/messages`)
  const after = page.messages.filter((m) => m.index > run.userMessageIndex && m.role === "assistant")
  return after.map((m) => m.content.filter((c) => c.type === "text").map((c) => c.text).join("")).join("")
}

test("streamed text equals the stored answer, and a second turn continues the same session", async () => {
  const transport = spoolTransport()
  const chatId = generateId()
  const messages = [userMessage("echo: hello big wide world")]
  const { chunks, stream } = tap(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }))
  const answer = await assemble(stream)
  assert.equal(answer.role, "assistant")
  assert.equal(textOf(answer), "hello big wide world")
  assert.equal(textOf(answer), await storedAnswer(answer.id))
  assert.deepEqual(
    chunks.map((c) => c.type).filter((t) => !t.startsWith("text-delta")),
    ["start", "start-step", "text-start", "text-end", "finish-step", "finish"],
  )
  const first = await api("GET", `/api/runs/${answer.id}`)

  messages.push(answer, userMessage("echo: again"))
  const second = await assemble(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }))
  assert.equal(textOf(second), "again")
  const run = await api("GET", `/api/runs/${second.id}`)
  assert.equal(run.sessionId, first.sessionId, "the chat id names one session")
  // Nothing is running: a reconnect finds no stream.
  assert.equal(await transport.reconnectToStream({ chatId }), null)
})

test("a tool call is a tool part with its input and output", async () => {
  const transport = spoolTransport()
  const messages = [userMessage('tool: read {"path":"README.md"}')]
  const answer = await assemble(await transport.sendMessages({ chatId: generateId(), messages, trigger: "submit-message" }))
  const tools = answer.parts.filter((p) => p.type === "dynamic-tool")
  assert.equal(tools.length, 1, JSON.stringify(answer.parts))
  assert.equal(tools[0].toolName, "read")
  assert.equal(tools[0].providerExecuted, true, "Spool runs it: no onToolCall for the client")
  assert.equal(tools[0].state, "output-available")
  assert.deepEqual(tools[0].input, { path: "README.md" })
  assert.match(tools[0].output, /A project for the AI SDK test/)
  assert.equal(textOf(answer), await storedAnswer(answer.id))
  assert.notEqual(textOf(answer), "")
})

/** Sends a write that needs approval; returns the chat so far and the asking part. */
async function askToWrite(transport, chatId, file) {
  const args = JSON.stringify({ path: file, content: "written through the AI SDK" })
  const messages = [userMessage(`tool: write ${args}`)]
  const asked = await assemble(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }))
  const part = asked.parts.find((p) => p.type === "dynamic-tool" && p.toolName === "write")
  assert.equal(part?.state, "approval-requested", JSON.stringify(asked.parts))
  assert.match(part.approval.id, /^per_/)
  return { messages: [...messages, asked], asked, part }
}

/** What `addToolApprovalResponse` does to the message: the part now carries the answer. */
function respond(message, approvalId, approved, reason) {
  const parts = message.parts.map((p) =>
    p.approval?.id === approvalId
      ? { ...p, state: "approval-responded", approval: { ...p.approval, approved, reason } }
      : p,
  )
  return { ...message, parts }
}

test("an approval round trip: approved, the tool runs and the same message goes on", async () => {
  const transport = spoolTransport()
  const chatId = generateId()
  const { messages, asked, part } = await askToWrite(transport, chatId, "approved.txt")
  await assert.rejects(access(path.join(projectDir, "approved.txt")), "nothing is written before the decision")

  const answered = respond(asked, part.approval.id, true)
  messages[messages.length - 1] = answered
  const stream = await transport.sendMessages({ chatId, messages, trigger: "submit-message" })
  const done = await assemble(stream, answered)
  assert.equal(done.id, asked.id, "one run, one message")
  const tool = done.parts.find((p) => p.toolCallId === part.toolCallId)
  assert.equal(tool.state, "output-available", JSON.stringify(done.parts))
  assert.equal(await readFile(path.join(projectDir, "approved.txt"), "utf8"), "written through the AI SDK")
  assert.equal(textOf(done), await storedAnswer(done.id))
  assert.notEqual(textOf(done), "")
})

test("an approval round trip: denied, the tool never runs and the model is told", async () => {
  const transport = spoolTransport()
  const chatId = generateId()
  const { messages, asked, part } = await askToWrite(transport, chatId, "denied.txt")
  const answered = respond(asked, part.approval.id, false, "not this file")
  messages[messages.length - 1] = answered
  const done = await assemble(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }), answered)
  const tool = done.parts.find((p) => p.toolCallId === part.toolCallId)
  assert.equal(tool.state, "output-denied", JSON.stringify(done.parts))
  await assert.rejects(access(path.join(projectDir, "denied.txt")))
  const run = await api("GET", `/api/runs/${done.id}`)
  assert.equal(run.status, "completed")
})

test("a steer the run takes after an approval is a data-spool-steer part of the same message", async () => {
  const transport = spoolTransport()
  const chatId = generateId()
  const { messages, asked, part } = await askToWrite(transport, chatId, "steered.txt")
  assert.ok(!asked.parts.some((p) => p.type === "data-spool-steer"), "the prompt is the client's own")
  const run = await api("GET", `/api/runs/${asked.id}`)
  const steered = await api("POST", `/api/sessions/${run.sessionId}/steer`, { text: "echo: and then this" })

  const answered = respond(asked, part.approval.id, true)
  messages[messages.length - 1] = answered
  const done = await assemble(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }), answered)
  const steers = done.parts.filter((p) => p.type === "data-spool-steer")
  assert.deepEqual(
    steers.map((p) => p.data),
    [{ messageId: steered.messageId, text: "echo: and then this" }],
    JSON.stringify(done.parts),
  )
  // The run answered it after taking it: the text after the part.
  const at = done.parts.indexOf(steers[0])
  const after = done.parts.slice(at).filter((p) => p.type === "text").map((p) => p.text).join("")
  assert.equal(after, "and then this")
})

test("a steer sent with a file carries it in its data-spool-steer part as a FileUIPart whose URL gives the bytes", async () => {
  const transport = spoolTransport()
  const chatId = generateId()
  const { messages, asked, part } = await askToWrite(transport, chatId, "steered-file.txt")
  const run = await api("GET", `/api/runs/${asked.id}`)
  const log = Buffer.from("line one\n")
  const file = { type: "file", url: `data:text/plain;base64,${log.toString("base64")}`, name: "app.log" }
  await api("POST", `/api/sessions/${run.sessionId}/steer`, { text: "echo: read it", parts: [file] })

  const answered = respond(asked, part.approval.id, true)
  messages[messages.length - 1] = answered
  const done = await assemble(await transport.sendMessages({ chatId, messages, trigger: "submit-message" }), answered)
  const steer = done.parts.find((p) => p.type === "data-spool-steer")
  assert.equal(steer.data.text, "echo: read it")
  const [sent] = steer.data.files
  assert.deepEqual(
    { type: sent.type, mediaType: sent.mediaType, filename: sent.filename },
    { type: "file", mediaType: "text/plain", filename: "app.log" },
  )
  const fetched = await fetch(new URL(sent.url, baseUrl))
  assert.equal(fetched.status, 200)
  assert.deepEqual(Buffer.from(await fetched.arrayBuffer()), log)
})

test("a question is a tool call the client answers with addToolOutput, once", async () => {
  const asked = []
  const chat = new Chat({
    transport: spoolTransport(),
    sendAutomaticallyWhen: answeredEverything,
    onToolCall: ({ toolCall }) => asked.push(toolCall),
  })
  const question = { question: "Which colour?", options: [{ label: "red" }, { label: "blue" }] }
  const parked = chat.finished()
  await chat.sendMessage({ text: `tool: question ${JSON.stringify(question)}` })
  const { finishReason } = await parked
  assert.equal(finishReason, "tool-calls", "the message stops at the question")
  // The question reaches the client as a call of a tool it answers: onToolCall, and a
  // part waiting for its output.
  assert.deepEqual(
    asked.map((c) => [c.toolName, c.input]),
    [["question", question]],
  )
  const part = chat.lastMessage.parts.find((p) => p.type === "dynamic-tool" && p.toolName === "question")
  assert.equal(part?.state, "input-available", JSON.stringify(chat.lastMessage.parts))
  assert.deepEqual(part.input, question)

  // The answer in the person's own words; the chat sends it by itself.
  const done = chat.finished()
  await chat.addToolOutput({ tool: "question", toolCallId: part.toolCallId, output: { answer: "green" } })
  const { message, finishReason: end } = await done
  assert.equal(end, "stop")
  assert.equal(message.id, chat.messages[1].id, "one run, one message")
  assert.match(textOf(message), /Tool question returned 1 line: The person answered: green/)
  assert.equal(textOf(message), await storedAnswer(message.id))
  const tool = message.parts.find((p) => p.toolCallId === part.toolCallId)
  assert.equal(tool.state, "output-available")
  assert.equal(tool.output, "The person answered: green")

  // The same answer sent again (a retried request) decides nothing twice.
  const answered = structuredClone(chat.messages)
  answered[1].parts = answered[1].parts.map((p) =>
    p.toolCallId === part.toolCallId ? { ...p, output: { answer: "green" } } : p,
  )
  const retried = await fetch(`${baseUrl}/api/ai-sdk/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id: chat.id, messages: answered, trigger: "submit-message" }),
  })
  assert.equal(retried.status, 200, await retried.clone().text())
  assert.match(await retried.text(), /"type":"finish"/)
  const run = await api("GET", `/api/runs/${message.id}`)
  const page = await api("GET", `/api/sessions/${run.sessionId}/messages`)
  assert.equal(page.messages.filter((m) => m.role === "toolResult").length, 1, "the question was answered once")
  assert.equal(run.status, "completed")
  // The answered message asks for nothing more: the chat sent once and is done.
  assert.equal(answeredEverything({ messages: chat.messages }), false)
  assert.equal(chat.status, "ready")
  assert.equal(chat.error, undefined)
})

test("a question declined with an output error tells the model", async () => {
  const chat = new Chat({ transport: spoolTransport(), sendAutomaticallyWhen: answeredEverything })
  const parked = chat.finished()
  await chat.sendMessage({ text: `tool: question ${JSON.stringify({ question: "Name the file?" })}` })
  await parked
  const part = chat.lastMessage.parts.find((p) => p.toolName === "question")
  assert.equal(part?.state, "input-available")
  const done = chat.finished()
  await chat.addToolOutput({ state: "output-error", toolCallId: part.toolCallId, errorText: "decide yourself" })
  const { message } = await done
  const tool = message.parts.find((p) => p.toolCallId === part.toolCallId)
  assert.equal(tool.state, "output-error")
  assert.match(tool.errorText, /decide yourself/)
  assert.match(textOf(message), /Tool question failed: .*decide yourself/)
})

/** Polls a run until `done(run)` holds (the server settles a stop on its own time). */
async function waitForRun(runId, done) {
  const deadline = Date.now() + 5_000
  for (;;) {
    const run = await api("GET", `/api/runs/${runId}`)
    if (done(run)) return run
    assert.ok(Date.now() < deadline, `run ${runId} is still ${run.status}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

test("stop() and the README's stop request end the agent's run", async () => {
  const chat = new Chat({ transport: spoolTransport() })
  const ended = chat.finished()
  chat.sendMessage({ text: "stream: 100000" })
  // Wait until the answer streams.
  for (;;) {
    const last = (await chat.changed()).at(-1)
    if (last.role === "assistant" && textOf(last).length > 0) break
  }
  const runId = chat.lastMessage.id
  // The README's stop button: the SDK's stop(), and the chat's run stopped by its id.
  await chat.stop()
  const stopped = await fetch(`${baseUrl}/api/ai-sdk/chat/${chat.id}/stream`, { method: "DELETE" })
  assert.equal(stopped.status, 200, await stopped.clone().text())
  assert.deepEqual(await stopped.json(), { aborted: true, runId })
  assert.equal((await ended).isAbort, true)
  const run = await waitForRun(runId, (r) => r.status !== "running")
  assert.equal(run.status, "cancelled")
  assert.ok((await storedAnswer(runId)).split(" ").length < 100000, "the run stopped before its end")
  // Nothing runs any more: stopping again stops nothing, and there is no stream to resume.
  const again = await fetch(`${baseUrl}/api/ai-sdk/chat/${chat.id}/stream`, { method: "DELETE" })
  assert.deepEqual(await again.json(), { aborted: false, runId: null })
  assert.equal(await spoolTransport().reconnectToStream({ chatId: chat.id }), null)
})

// The session's replay buffer holds 256 frames: cut after 20 deltas the run's start is
// still in it; after 300 it is not, and the stream is drawn from a snapshot.
/** How many session streams started as a replay or from a snapshot, from /metrics. */
async function streamStarts(mode) {
  const text = await (await fetch(`${baseUrl}/metrics`)).text()
  const line = text.split("\n").find((l) => l.startsWith(`spool_stream_starts_total{mode="${mode}"}`))
  return Number(line.split(" ")[1])
}

for (const [name, deltas, cutAt, mode] of [
  ["replayed from the buffer", 60, 20, "replay"],
  ["drawn from a snapshot once the run's start has left the buffer", 400, 300, "snapshot"],
]) {
  test(`a reload mid-answer resumes without duplicated text (${name})`, async () => {
    const transport = spoolTransport()
    const chatId = generateId()
    const messages = [userMessage(`stream: ${deltas}`)]
    const controller = new AbortController()
    const stream = await transport.sendMessages({
      chatId,
      messages,
      trigger: "submit-message",
      abortSignal: controller.signal,
    })
    // Read part of the answer, then drop the connection like a closing tab.
    const reader = stream.getReader()
    let seen = 0
    let runId
    while (seen < cutAt) {
      const { value, done } = await reader.read()
      assert.ok(!done, "the stream ended before the cut")
      if (value.type === "start") runId = value.messageId
      if (value.type === "text-delta") seen++
    }
    controller.abort()
    await reader.cancel().catch(() => {})
    // Still running: the reconnect gets the run from its start.
    const starts = await streamStarts(mode)
    const resumed = await transport.reconnectToStream({ chatId })
    assert.ok(resumed, "an active run has a stream to resume")
    assert.equal(await streamStarts(mode), starts + 1, `the resumed stream started as a ${mode}`)
    const { chunks, stream: tapped } = tap(resumed)
    const message = await assemble(tapped)
    assert.equal(message.id, runId)
    assert.equal(chunks[0].type, "start")
    assert.equal(chunks.at(-1).type, "finish")
    const texts = message.parts.filter((p) => p.type === "text")
    assert.equal(texts.length, 1, "one text part")
    assert.equal(textOf(message), await storedAnswer(runId))
    assert.equal(textOf(message).split(" ").length, deltas, "every delta once")
  })
}

test("bad requests are refused with a JSON error", async () => {
  const post = (body) =>
    fetch(`${baseUrl}/api/ai-sdk/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    })
  const messages = [userMessage("echo: hi")]
  for (const [body, code] of [
    [{ id: "../etc", messages }, "invalid_chat_id"],
    [{ id: "x".repeat(129), messages }, "invalid_chat_id"],
    [{ id: generateId(), messages }, "missing_project"],
    [{ id: generateId(), messages: [], projectId }, "no_messages"],
  ]) {
    const res = await post(body)
    assert.equal(res.status, 400)
    assert.equal((await res.json()).error.code, code)
  }
})

// Client-side tools: the README's declaration, sent in the transport's body beside
// projectId. The tool runs in the client (onToolCall), its output goes back with
// addToolOutput, and sendAutomaticallyWhen sends the chat again with it.
const clientTools = {
  get_weather: {
    description: "The weather in a city, as this app knows it",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}

/** What the client's `get_weather` returns. */
const weather = ({ city }) => ({ city, sky: "sunny", celsius: 3 })

const weatherPrompt = `tool: get_weather ${JSON.stringify({ city: "Oslo" })}`

/** The tool parts of the client's tool in `message`. */
const weatherParts = (message) => message.parts.filter((p) => p.type === "dynamic-tool" && p.toolName === "get_weather")

test("a client tool runs in the client and the run goes on with its output, once, across a server restart", async () => {
  const first = await work.serveWithProject("tools")
  let server = first
  const transport = new DefaultChatTransport({
    api: `${first.baseUrl}/api/ai-sdk/chat`,
    body: { projectId: first.projectId, tools: clientTools },
    // The same address after the restart, as a reverse proxy in front of it would keep.
    fetch: (url, init) => fetch(String(url).replace(first.baseUrl, server.baseUrl), init),
  })
  const calls = []
  let restarted
  const afterRestart = new Promise((resolve) => (restarted = resolve))
  const chat = new Chat({
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: ({ toolCall }) => {
      calls.push(toolCall)
      // The tool runs now; its output goes back once the server was restarted. Not
      // awaited: onToolCall must return before the stream it came in can end.
      const output = weather(toolCall.input)
      afterRestart.then(() => chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output }))
    },
  })
  const parked = chat.finished()
  await chat.sendMessage({ text: weatherPrompt })
  assert.equal((await parked).finishReason, "tool-calls", "the message stops at the client's call")
  assert.deepEqual(
    calls.map((c) => [c.toolName, c.input, c.providerExecuted, c.dynamic]),
    [["get_weather", { city: "Oslo" }, false, true]],
  )
  const [part] = weatherParts(chat.lastMessage)
  assert.equal(part?.state, "input-available", JSON.stringify(chat.lastMessage.parts))
  assert.match(part.callProviderMetadata?.spool?.approvalId ?? "", /^per_/)
  const runId = chat.lastMessage.id
  assert.equal((await first.api("GET", `/api/runs/${runId}`)).status, "interrupted")

  // The server goes away between the call and its output, and comes back on its data.
  await first.stop()
  server = await work.serve("tools")
  assert.equal((await server.api("GET", `/api/runs/${runId}`)).status, "interrupted", "still waiting after the restart")

  const done = chat.finishedWhen((f) => f.finishReason !== "tool-calls")
  restarted()
  const { message, finishReason } = await done
  assert.equal(finishReason, "stop")
  assert.equal(message.id, runId, "one run, one message")
  const parts = weatherParts(message)
  assert.equal(parts.length, 1, JSON.stringify(message.parts))
  assert.equal(parts[0].state, "output-available")
  assert.match(JSON.stringify(parts[0].output), /sunny/)
  assert.match(textOf(message), /Tool get_weather returned .*sunny/)
  assert.equal(textOf(message), await storedAnswer(runId, server.api))

  // The stored conversation holds the client's output once.
  const run = await server.api("GET", `/api/runs/${runId}`)
  assert.equal(run.status, "completed")
  const page = await server.api("GET", `/api/sessions/${run.sessionId}/messages`)
  const results = page.messages.filter((m) => m.role === "toolResult")
  assert.equal(results.length, 1, JSON.stringify(results))
  assert.equal(results[0].toolName, "get_weather")
  assert.equal(results[0].isError, false)
  assert.match(results[0].content[0].text, /sunny/)
  // Answered: the chat asks for nothing more and sent once.
  assert.equal(lastAssistantMessageIsCompleteWithToolCalls({ messages: chat.messages }), false)
  assert.equal(calls.length, 1)
  assert.equal(chat.status, "ready")
  assert.equal(chat.error, undefined)
})

test("a client tool's output error gives the model an error result", async () => {
  const chat = new Chat({
    transport: new DefaultChatTransport({
      api: `${baseUrl}/api/ai-sdk/chat`,
      body: { projectId, tools: clientTools },
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    // The tool fails in the client; not awaited (the stream it came in is still open).
    onToolCall: ({ toolCall }) => {
      chat.addToolOutput({
        tool: toolCall.toolName,
        toolCallId: toolCall.toolCallId,
        state: "output-error",
        errorText: "location services are off",
      })
    },
  })
  const done = chat.finishedWhen((f) => f.finishReason !== "tool-calls")
  await chat.sendMessage({ text: weatherPrompt })
  const { message, finishReason } = await done
  assert.equal(finishReason, "stop")
  const parts = weatherParts(message)
  assert.equal(parts.length, 1, JSON.stringify(message.parts))
  assert.equal(parts[0].state, "output-error")
  assert.match(parts[0].errorText, /location services are off/)
  assert.match(textOf(message), /Tool get_weather failed: .*location services are off/)
  const run = await api("GET", `/api/runs/${message.id}`)
  const page = await api("GET", `/api/sessions/${run.sessionId}/messages`)
  const results = page.messages.filter((m) => m.role === "toolResult")
  assert.equal(results.length, 1)
  assert.equal(results[0].isError, true)
  assert.equal(chat.error, undefined)
})

/** The scripted model's line for a file it got whole (issue 42). */
function received(name, mediaType, bytes) {
  const sha = createHash("sha256").update(bytes).digest("hex")
  return `Received ${name} (${mediaType}, ${bytes.length} bytes, sha256 ${sha.slice(0, 8)}…, bytes match)\n`
}

test("a file sent with sendMessage({text, files}) reaches the model, and the next message does not send it again", async () => {
  const chat = new Chat({ transport: spoolTransport() })
  const log = Buffer.from("line one\n")
  const file = { type: "file", mediaType: "text/plain", filename: "app.log", url: `data:text/plain;base64,${log.toString("base64")}` }
  let done = chat.finished()
  await chat.sendMessage({ text: "echo: seen", files: [file] })
  const first = await done
  assert.equal(first.isError, false)
  assert.equal(textOf(chat.lastMessage), received("app.log", "text/plain", log) + "seen")
  assert.equal(textOf(chat.lastMessage), await storedAnswer(chat.lastMessage.id))

  // The transport sends the first message's file again with the whole chat; only the new
  // message's text is prompted.
  done = chat.finished()
  await chat.sendMessage({ text: "echo: again" })
  await done
  assert.equal(textOf(chat.lastMessage), "again")
})
