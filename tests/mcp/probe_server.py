"""A small MCP server on the official Python SDK, for Spool's tests
(crates/server/tests/mcp_python.rs): one ordinary tool, and four that probe the
sandbox Spool starts a stdio server in. The probes do what they are asked and
turn an OS error into a ToolError (the SDK hides any other exception's text), so
a refusal reaches the client as a tool error carrying the system's own words
("Permission denied"). Plain text results (structured_output=False): the SDK would
otherwise add a structured copy of each string, which the tests need not read."""

import os
import socket

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("probe")


@server.tool(structured_output=False)
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return f"{a} + {b} = {a + b}"


@server.tool(structured_output=False)
def read_file(path: str) -> str:
    """Returns the first 64 bytes of a file, as text."""
    try:
        with open(path, "rb") as f:
            return f.read(64).decode("utf-8", "replace")
    except OSError as e:
        raise ToolError(str(e)) from e


@server.tool(structured_output=False)
def write_file(path: str, text: str) -> str:
    """Writes text to a file, creating or replacing it."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise ToolError(str(e)) from e
    return f"wrote {len(text)} characters to {path}"


@server.tool(structured_output=False)
def connect(port: int) -> str:
    """Opens a TCP connection to a port on 127.0.0.1 and closes it."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError as e:
        raise ToolError(str(e)) from e
    return f"connected to port {port}"


@server.tool(structured_output=False)
def env(name: str) -> str:
    """The value of an environment variable, or (unset)."""
    return f"{name}=[{os.environ.get(name, '(unset)')}]"


if __name__ == "__main__":
    server.run("stdio")
