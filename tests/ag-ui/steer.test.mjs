// Steering seen through `@ag-ui/client`'s own HttpAgent: a user message sent into the
// running run (`POST /api/sessions/:id/steer`) arrives in the run's AG-UI stream as a
// user text message, where the run took it, and the agent's messages hold it before
// the answer to it — as the server stored them. The client's own prompt is not sent
// back. A steer's files ride on its TEXT_MESSAGE_START as AG-UI content parts, which
// the client keeps in the message's metadata. SPOOL_BIN names the binary (default: target/debug/spool at the repository root).

import { test, before } from "node:test"
import assert from "node:assert/strict"
import { randomUUID } from "node:crypto"
import { HttpAgent } from "@ag-ui/client"
import { ContentPartSchema, EventSchemas } from "@ag-ui/core/schemas"
import { workspace } from "../support/spool.mjs"

const work = workspace("spool-ag-ui-steer-")
let baseUrl
let api
let projectId

before(async () => {
  ;({ baseUrl, api, projectId } = await work.serveWithProject("data", { files: { "README.md": "# Demo\n" } }))
})

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text })
}

/** The agent's messages as `[role, text]`, tool calls as their count. */
const shown = (agent) => agent.messages.map((m) => [m.role, m.toolCalls?.length ?? m.content])

/** The session's stored messages as `[role, text]`. */
async function stored(sessionId) {
  const page = await api("GET", `/api/sessions/${sessionId}/messages`)
  return page.messages.map((m) => [m.role, m.content.filter((c) => c.type === "text").map((c) => c.text).join("")])
}

test("a steer sent while the model streams shows as a user message the run then answers", async () => {
  const agent = new HttpAgent({ url: `${baseUrl}/api/ag-ui` })
  say(agent, "stream: 200")
  let steered
  const events = []
  await agent.runAgent(
    { forwardedProps: { projectId } },
    {
      onEvent: ({ event }) => events.push(event),
      // The first words arrived: the run is in its model call.
      onTextMessageContentEvent: ({ state }) => {
        steered ??= api("POST", `/api/sessions/${state.sessionId}/steer`, { text: "echo: and now this" })
      },
    },
  )
  assert.ok(steered, "the run streamed")
  await steered
  assert.deepEqual(events.at(-1).outcome, { type: "success" })
  const users = events.filter((e) => e.type === "TEXT_MESSAGE_START" && e.role === "user")
  assert.equal(users.length, 1, "the steer once; the prompt the agent sent is not sent back")
  const roles = agent.messages.map((m) => m.role)
  assert.deepEqual(roles, ["user", "assistant", "user", "assistant"])
  assert.equal(agent.messages[2].content, "echo: and now this")
  assert.equal(agent.messages[3].content, "and now this")
  const sessionId = agent.state.sessionId
  assert.deepEqual(shown(agent).slice(2), (await stored(sessionId)).slice(2))
})

test("a steer sent while the run waits at an approval shows in the stream that answers it", async () => {
  const agent = new HttpAgent({ url: `${baseUrl}/api/ag-ui` })
  say(agent, `tool: write ${JSON.stringify({ path: "steered.txt", content: "x" })}`)
  await agent.runAgent({ forwardedProps: { projectId } })
  assert.equal(agent.pendingInterrupts.length, 1)
  await api("POST", `/api/sessions/${agent.state.sessionId}/steer`, { text: "echo: after the write" })
  const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }))
  await agent.runAgent({ forwardedProps: { projectId }, resume })
  const roles = agent.messages.map((m) => m.role)
  assert.deepEqual(roles, ["user", "assistant", "tool", "user", "assistant"])
  assert.equal(agent.messages[3].content, "echo: after the write")
  assert.equal(agent.messages[4].content, "after the write")
  const kept = await stored(agent.state.sessionId)
  assert.deepEqual(kept.map(([role]) => role), ["user", "assistant", "toolResult", "user", "assistant"])
  assert.equal(kept[3][1], "echo: after the write")
})

test("a steer sent with a file shows as a user message carrying it as an AG-UI content part whose URL gives the bytes", async () => {
  const agent = new HttpAgent({ url: `${baseUrl}/api/ag-ui` })
  say(agent, `tool: write ${JSON.stringify({ path: "with-file.txt", content: "x" })}`)
  await agent.runAgent({ forwardedProps: { projectId } })
  assert.equal(agent.pendingInterrupts.length, 1)
  const log = Buffer.from("line one\n")
  const file = { type: "file", url: `data:text/plain;base64,${log.toString("base64")}`, name: "app.log" }
  await api("POST", `/api/sessions/${agent.state.sessionId}/steer`, { text: "echo: read it", parts: [file] })
  const events = []
  const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload: { approved: true } }))
  await agent.runAgent({ forwardedProps: { projectId }, resume }, { onEvent: ({ event }) => events.push(event) })

  const start = events.find((e) => e.type === "TEXT_MESSAGE_START" && e.role === "user")
  assert.ok(EventSchemas.safeParse(start).success, JSON.stringify(start))
  const steer = agent.messages.find((m) => m.id === start.messageId)
  assert.equal(steer.content, "echo: read it")
  const [part] = steer.metadata.spool.files
  assert.ok(ContentPartSchema.safeParse(part).success, JSON.stringify(part))
  assert.deepEqual(
    { type: part.type, source: { type: part.source.type, mimeType: part.source.mimeType }, filename: part.metadata.filename },
    { type: "document", source: { type: "url", mimeType: "text/plain" }, filename: "app.log" },
  )
  const fetched = await fetch(new URL(part.source.value, baseUrl))
  assert.equal(fetched.status, 200)
  assert.deepEqual(Buffer.from(await fetched.arrayBuffer()), log)
  assert.match(agent.messages.at(-1).content, /^Received app\.log \(text\/plain, 9 bytes/)
})
