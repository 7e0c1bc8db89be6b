"""Set up Flood Memory on this machine: data directory, test run, client configuration.

    python3 setup.py             # all three
    python3 setup.py --no-tests  # skip the test run

It changes nothing outside the data directory: the client configuration is printed, for
you to paste where it says.
"""

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "flood-memory"
MIN_PYTHON = (3, 11)


def interpreter():
    """The command that starts Python 3 here: python, python3, or this interpreter's path."""
    for command in ("python", "python3"):
        path = shutil.which(command)
        if path is None:
            continue
        try:
            out = subprocess.run([path, "-c", "import sys, sqlite3; print(*sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        parts = out.stdout.split()
        if out.returncode == 0 and len(parts) == 2 and tuple(map(int, parts)) >= MIN_PYTHON:
            return command
    return sys.executable


def desktop_config_path():
    """Where Claude Desktop keeps its configuration on this OS."""
    system = platform.system()
    if system == "Darwin":
        return "~/Library/Application Support/Claude/claude_desktop_config.json"
    if system == "Windows":
        return os.path.join(os.environ.get("APPDATA", r"%APPDATA%"), "Claude",
                            "claude_desktop_config.json")
    return "~/.config/Claude/claude_desktop_config.json"


def shell_quote(text):
    if platform.system() == "Windows":
        return f'"{text}"' if " " in text else text
    return text if text and all(c.isalnum() or c in "/._-~:=" for c in text) else f"'{text}'"


def local_config(python, data_dir):
    entry = {"command": python, "args": [os.path.join(HERE, "server.py")],
             "env": {"FLOOD_MEMORY_DIR": data_dir}}
    return {"mcpServers": {NAME: entry}}


def remote_config(url, token):
    entry = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
    return {"mcpServers": {NAME: entry}}


def run_tests():
    print("Running the test suite (python3 test.py)...", flush=True)
    return subprocess.run([sys.executable, os.path.join(HERE, "test.py")], cwd=HERE).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(description="Set up Flood Memory on this machine.")
    parser.add_argument("--no-tests", action="store_true", help="skip the test run")
    args = parser.parse_args(argv)
    if sys.version_info < MIN_PYTHON:
        print(f"setup.py: Flood Memory needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; "
              f"this is {platform.python_version()}", file=sys.stderr)
        return 1

    sys.path.insert(0, HERE)
    from store import DEFAULT_DIR, StoreError, open_directory

    data_dir = os.environ.get("FLOOD_MEMORY_DIR") or DEFAULT_DIR
    if not data_dir.startswith("~"):
        data_dir = os.path.abspath(data_dir)  # clients start the server from elsewhere
    try:
        open_directory(data_dir).close()
    except StoreError as exc:
        print(f"setup.py: {exc}", file=sys.stderr)
        return 1
    print(f"Data directory: {os.path.expanduser(data_dir)} (memory.db is ready)")

    if not args.no_tests and run_tests() != 0:
        print("setup.py: the tests failed; fix that before connecting a client.", file=sys.stderr)
        return 1

    python = interpreter()
    server = os.path.join(HERE, "server.py")
    config = json.dumps(local_config(python, data_dir), indent=2)
    print(f"""
== Claude Desktop: merge into {desktop_config_path()}
{config}

== Claude Code, for one project: merge into .mcp.json at the project's root
{config}

== Claude Code, for every project, in one line:
claude mcp add --transport stdio --scope user {NAME} --env FLOOD_MEMORY_DIR={shell_quote(data_dir)} -- {shell_quote(python)} {shell_quote(server)}
""")
    token = secrets.token_urlsafe(32)
    url = "http://HOST:8080/mcp"
    print(f"""== Remote (HTTP) server, optional: start it on the machine that keeps the memories,
   with this freshly generated token (keep it secret; any token of your own works too):
FLOOD_MEMORY_AUTH_TOKEN={token} FLOOD_MEMORY_DIR={shell_quote(data_dir)} {shell_quote(python)} {shell_quote(os.path.join(HERE, "server_remote.py"))}

   then, on each client, with HOST replaced by that machine's name or address:
claude mcp add --transport http --scope user {NAME} {url} --header "Authorization: Bearer {token}"

   or in .mcp.json:
{json.dumps(remote_config(url, token), indent=2)}

   Without a token the server is open to anyone who can reach it, so it then listens on
   127.0.0.1 only. Put it behind HTTPS (a reverse proxy) before it crosses a network you
   do not trust: a bearer token over plain HTTP can be read on the way.
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
