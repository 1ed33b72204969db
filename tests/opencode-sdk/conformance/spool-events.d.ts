// What Spool's OpenCode events are checked against: the `@opencode-ai/sdk` v2 types as
// they are, with JSON Schemas generated from this file (`additionalProperties: false`, so a
// field the SDK does not declare fails). Spool answers both generations of the SDK at
// once (`crates/server/src/dialect/opencode/wire.rs`): where they disagree it sends the
// union of both, so those few events are declared here as exactly that union — v2's
// event with v1's fields beside — and nothing else is widened.
import type * as v1 from "../node_modules/@opencode-ai/sdk/dist/gen/types.gen.js"
import type * as v2 from "../node_modules/@opencode-ai/sdk/dist/v2/gen/types.gen.js"

/** v1's `Permission` fields that v2's `PermissionRequest` does not have. */
type V1PermissionFields = Omit<v1.Permission, keyof v2.PermissionRequest>

/** A pending permission: v2's `PermissionRequest` and v1's `Permission` in one object. */
type Permission = v2.PermissionRequest & V1PermissionFields

type PermissionAsked = Omit<v2.EventPermissionAsked, "properties"> & { properties: Permission }

/** v1's name for a new permission, with the `id` every event carries for v2. */
type PermissionUpdated = { id: string; type: "permission.updated"; properties: Permission }

/** The answer named both ways: v2's `requestID`/`reply`, v1's `permissionID`/`response`. */
type PermissionReplied = Omit<v2.EventPermissionReplied, "properties"> & {
  properties: v2.EventPermissionReplied["properties"] & Omit<v1.EventPermissionReplied["properties"], "sessionID">
}

/** Todos with v1's required `id` (v2's `Todo` has none). */
type TodoUpdated = Omit<v2.EventTodoUpdated, "properties"> & {
  properties: { sessionID: string; todos: Array<v2.Todo & Pick<v1.Todo, "id">> }
}

/** OpenCode's own server sends it every 10 s; neither SDK declares it. */
type ServerHeartbeat = { id: string; type: "server.heartbeat"; properties: {} }

/** Spool's own: who is on the session now (README "Presence"); neither SDK declares it,
 * and a client that does not know it skips it, as it skips `server.heartbeat`. */
type SpoolPresence = {
  id: string
  type: "spool.presence"
  properties: {
    sessionID: string
    viewers: number
    answerers: number
    visible: number
    clients?: { web?: number; cli?: number; hub?: number; "ag-ui"?: number; "ai-sdk"?: number; opencode?: number; other?: number }
  }
}

type Widened = "permission.asked" | "permission.replied" | "todo.updated"

export type SpoolEvent =
  | Exclude<v2.Event, { type: Widened }>
  | PermissionAsked
  | PermissionUpdated
  | PermissionReplied
  | TodoUpdated
  | ServerHeartbeat
  | SpoolPresence

export type SpoolGlobalEvent = Omit<v2.GlobalEvent, "payload"> & {
  payload: Exclude<v2.GlobalEvent["payload"], { type: Widened }> | PermissionAsked | PermissionUpdated | PermissionReplied | TodoUpdated | ServerHeartbeat | SpoolPresence
}
