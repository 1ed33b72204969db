// Every chunk Spool's AI SDK endpoint sends, checked against the `ai` package's own
// `uiMessageChunkSchema` (the zod schema `DefaultChatTransport` parses the stream with;
// issue 37: "a published schema that Spool's own events break is a failing test"). One
// scripted session goes through text, thinking, a bash call approved with its output, a
// write rejected, a question answered, a client-side tool's call answered, plan mode's `exit_plan`, todos, the queue with a
// deleted prompt, a cancelled run; a second server with a tiny answer limit fails a
// run. Every `data:` line of every response is collected raw and validated.
//
// The package's chunk schemas are `looseObject`s: a field it does not know passes (Spool's
// `approvalDescriptor` is one). A title, live tool output and git changes have no chunk in
// the protocol, so none is sent.
//
// SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test } from "node:test"
import assert from "node:assert/strict"
import { generateId, readUIMessageStream, uiMessageChunkSchema } from "ai"
import { WAIT_MS, workspace } from "../support/spool.mjs"

const work = workspace("spool-ai-sdk-conformance-")

/**
 * Reads a UI message stream response: every `data:` chunk in order (`[DONE]` as the
 * string), `onChunk` called with each as it arrives.
 */
async function chunksOf(res, onChunk = () => {}) {
  if (res.status !== 200) assert.fail(`${res.status}: ${await res.text()}`)
  assert.equal(res.headers.get("x-vercel-ai-ui-message-stream"), "v1")
  const chunks = []
  const decoder = new TextDecoder()
  let buffered = ""
  for await (const bytes of res.body) {
    buffered += decoder.decode(bytes, { stream: true })
    let end
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end)
      buffered = buffered.slice(end + 2)
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue
        const data = line.slice("data: ".length)
        const chunk = data === "[DONE]" ? data : JSON.parse(data)
        chunks.push(chunk)
        await onChunk(chunk)
      }
    }
  }
  assert.equal(chunks.at(-1), "[DONE]", "the stream ends with [DONE]")
  return chunks.slice(0, -1)
}

/**
 * The assistant message the chunks assemble to, continuing `message` if given; the
 * stream reports no error but the one an `error` chunk sends.
 */
async function assemble(chunks, message) {
  let last
  const errors = []
  const stream = ReadableStream.from(chunks)
  for await (const m of readUIMessageStream({ stream, message, onError: (e) => errors.push(e) })) last = m
  const sent = chunks.filter((c) => c.type === "error").map((c) => c.errorText)
  assert.deepEqual(errors.map((e) => e.message), sent)
  return last
}

function userMessage(text) {
  return { id: generateId(), role: "user", parts: [{ type: "text", text }] }
}

/** A chat of one server: sends as `DefaultChatTransport` does (with `body` added to
 * each request, as its `body` option does), keeps every chunk. */
function chatOn(spool, seen, body = {}) {
  const id = generateId()
  const messages = []
  const post = async (onChunk) => {
    const res = await fetch(`${spool.baseUrl}/api/ai-sdk/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ id, messages, trigger: "submit-message", projectId: spool.projectId, ...body }),
    })
    const chunks = await chunksOf(res, onChunk)
    seen.push(...chunks)
    return chunks
  }
  return {
    id,
    messages,
    /** Sends a prompt; the assembled answer joins the chat. */
    async send(text, onChunk) {
      messages.push(userMessage(text))
      const chunks = await post(onChunk)
      const answer = await assemble(chunks)
      messages.push(answer)
      return { chunks, answer }
    },
    /** Resends the chat with the last message's part for `toolCallId` changed by `change`. */
    async answer(toolCallId, change) {
      const last = messages.at(-1)
      const answered = { ...last, parts: last.parts.map((p) => (p.toolCallId === toolCallId ? change(p) : p)) }
      messages[messages.length - 1] = answered
      const chunks = await post()
      messages[messages.length - 1] = await assemble(chunks, answered)
      return { chunks, answer: messages.at(-1) }
    },
    /** The chat's active run's stream (`reconnectToStream`), or null when none. */
    async resume() {
      const res = await fetch(`${spool.baseUrl}/api/ai-sdk/chat/${id}/stream`)
      if (res.status === 204) return null
      const chunks = await chunksOf(res)
      seen.push(...chunks)
      return chunks
    },
  }
}

const toolPart = (message, name) => message.parts.find((p) => p.type === "dynamic-tool" && p.toolName === name)
const approve = (approved, reason) => (p) => ({
  ...p,
  state: "approval-responded",
  approval: { ...p.approval, approved, reason },
})
const sessionOf = async (spool, runId) => (await spool.api("GET", `/api/runs/${runId}`)).sessionId

/** Everything one scripted session sends through the AI SDK endpoint. */
async function aWholeSession(spool) {
  const seen = []
  const tools = { get_weather: { description: "The weather in a city", inputSchema: { type: "object" } } }
  const chat = chatOn(spool, seen, { tools })

  const { answer: first } = await chat.send("think: weighing the options | the answer is here")
  const session = await sessionOf(spool, first.id)

  let { answer } = await chat.send(`tool: bash ${JSON.stringify({ command: "echo one; echo two" })}`)
  let part = toolPart(answer, "bash")
  assert.equal(part?.state, "approval-requested", JSON.stringify(answer.parts))
  ;({ answer } = await chat.answer(part.toolCallId, approve(true)))
  assert.equal(toolPart(answer, "bash").state, "output-available", JSON.stringify(answer.parts))

  ;({ answer } = await chat.send(`tool: write ${JSON.stringify({ path: "no.txt", content: "x" })}`))
  part = toolPart(answer, "write")
  ;({ answer } = await chat.answer(part.toolCallId, approve(false, "not this one")))
  assert.equal(toolPart(answer, "write").state, "output-denied")

  const question = { question: "Pick", options: [{ label: "A" }, { label: "B" }] }
  ;({ answer } = await chat.send(`tool: question ${JSON.stringify(question)}`))
  part = toolPart(answer, "question")
  assert.equal(part?.state, "input-available", JSON.stringify(answer.parts))
  ;({ answer } = await chat.answer(part.toolCallId, (p) => ({ ...p, state: "output-available", output: { answer: "A" } })))
  assert.equal(toolPart(answer, "question").state, "output-available")

  // A call of a tool the client runs, answered with its output.
  ;({ answer } = await chat.send(`tool: get_weather ${JSON.stringify({ city: "Oslo" })}`))
  part = toolPart(answer, "get_weather")
  assert.equal(part?.state, "input-available", JSON.stringify(answer.parts))
  assert.equal(part.providerExecuted, false)
  ;({ answer } = await chat.answer(part.toolCallId, (p) => ({ ...p, state: "output-available", output: { sky: "sunny" } })))
  assert.equal(toolPart(answer, "get_weather").state, "output-available")

  const todos = { todos: [{ content: "Read", status: "completed" }, { content: "Write", status: "pending" }] }
  await chat.send(`tool: todo_write ${JSON.stringify(todos)}`)

  // A tool that fails: its output is an error.
  ;({ answer } = await chat.send(`tool: read ${JSON.stringify({ path: "missing.txt" })}`))
  assert.equal(toolPart(answer, "read")?.state, "output-error", JSON.stringify(answer.parts))

  // The queue: a parked run, two prompts queued behind it, one removed; the kept one
  // parks at its own approval, where the chat's resumed stream finds it.
  ;({ answer } = await chat.send(`tool: write ${JSON.stringify({ path: "a.txt", content: "x" })}`))
  part = toolPart(answer, "write")
  const queued = []
  for (const text of ["echo: never", `tool: write ${JSON.stringify({ path: "kept.txt", content: "x" })}`]) {
    const body = await spool.api("POST", `/api/sessions/${session}/prompt`, { text, queue: true })
    queued.push(body.messageId)
  }
  await spool.api("DELETE", `/api/messages/${queued[0]}`)
  await chat.answer(part.toolCallId, approve(true))
  let resumed
  for (const deadline = Date.now() + WAIT_MS; ; ) {
    resumed = await chat.resume()
    if (resumed?.some((c) => c.type === "tool-approval-request")) break
    assert.ok(Date.now() < deadline, "the kept prompt's run parks at its approval")
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  const kept = await assemble(resumed)
  chat.messages.push(kept)
  await chat.answer(toolPart(kept, "write").toolCallId, approve(false))

  // Plan mode: the plan asks through `exit_plan`, rejected here.
  await spool.api("PATCH", `/api/sessions/${session}`, { mode: "plan" })
  ;({ answer } = await chat.send(`tool: exit_plan ${JSON.stringify({ plan: "# Plan\n1. edit" })}`))
  part = toolPart(answer, "exit_plan")
  assert.equal(part?.state, "approval-requested", JSON.stringify(answer.parts))
  await chat.answer(part.toolCallId, approve(false, "not yet"))
  await spool.api("PATCH", `/api/sessions/${session}`, { mode: "agent" })

  // A cancelled run: stopped while it streams.
  let stopping
  await chat.send("stream: 100000", (chunk) => {
    if (chunk.type === "text-delta" && !stopping) {
      stopping = fetch(`${spool.baseUrl}/api/ai-sdk/chat/${chat.id}/stream`, { method: "DELETE" })
    }
  })
  assert.equal((await stopping).status, 200)
  return seen
}

/** A run that fails: more answer than the server allows. */
async function aFailedRun(spool) {
  const seen = []
  const { chunks } = await chatOn(spool, seen).send("stream: 500")
  const error = chunks.find((c) => c.type === "error")
  assert.match(error?.errorText ?? "", /.+/, JSON.stringify(chunks.slice(-3)))
  return seen
}

test("every chunk Spool sends is a UIMessageChunk by the ai package's own schema", async () => {
  const chunks = [
    ...(await aWholeSession(await work.serveWithProject("main"))),
    ...(await aFailedRun(await work.serveWithProject("small", { args: ["--max-answer-bytes", "64"] }))),
  ]
  const schema = uiMessageChunkSchema()
  const broken = []
  for (const chunk of chunks) {
    const result = await schema.validate(chunk)
    if (!result.success) broken.push({ chunk, error: result.error.message })
  }
  assert.deepEqual(broken, [], "chunks the ai package's schema refuses")

  // The scenario reached every chunk type Spool sends.
  const types = new Set(chunks.map((c) => c.type))
  for (const type of [
    "start", "start-step", "finish-step", "finish", "error", "abort",
    "text-start", "text-delta", "text-end", "reasoning-start", "reasoning-delta", "reasoning-end",
    "tool-input-start", "tool-input-delta", "tool-input-available", "tool-approval-request",
    "tool-output-available", "tool-output-error", "tool-output-denied",
  ]) {
    assert.ok(types.has(type), `no ${type} chunk was seen: ${[...types].join(", ")}`)
  }
})
