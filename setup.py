"""Set up Flood Memory on this machine: data directory, test run, client configuration.

    python3 setup.py             # all three
    python3 setup.py --no-tests  # skip the test run

It changes nothing outside the data directory: the client configuration is printed, for
you to paste where it says. Before printing it, it starts the server exactly as a client
will (the same command, in the bare environment a desktop app gives its servers) and checks
that the server answers.
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
TOKEN_VARIABLE = "FLOOD_MEMORY_AUTH_TOKEN"

# What an interpreter must do for the server: be new enough and have SQLite with FTS5.
_PROBE = ("import sys, sqlite3; sqlite3.connect(':memory:').execute("
          "'CREATE VIRTUAL TABLE t USING fts5(x)'); print(*sys.version_info[:2])")

# Where Python 3.11+ often lives when the one running setup is not fit to serve.
_LIKELY = ["/opt/homebrew/bin", "/usr/local/bin", "/usr/bin",
           "/Library/Frameworks/Python.framework/Versions/Current/bin"]


def bare_environment():
    """The environment a GUI app (Claude Desktop) gives the servers it starts: no shell
    profile, so no PATH additions (pyenv, Homebrew, virtualenvs)."""
    if platform.system() == "Windows":
        keep = ("SYSTEMROOT", "USERPROFILE", "APPDATA", "LOCALAPPDATA", "TEMP", "TMP")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env["PATH"] = os.path.join(os.environ.get("SYSTEMROOT", r"C:\Windows"), "System32")
        return env
    return {"HOME": os.path.expanduser("~"), "PATH": "/usr/bin:/bin"}


def fit_to_serve(python):
    """Why `python` cannot run the server, or None if it can."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             timeout=30, env=bare_environment())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"it does not start ({exc})"
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return f"it cannot use SQLite's full-text search ({last})"
    if tuple(map(int, parts)) < MIN_PYTHON:
        return f"it is Python {'.'.join(parts)}, older than {'.'.join(map(str, MIN_PYTHON))}"
    return None


def interpreter():
    """An absolute path to the Python that clients should start the server with: the one
    running setup, unless it is unfit, then the first fit one found. (None, reasons) if
    there is none."""
    candidates = [sys.executable]
    for name in ("python3.14", "python3.13", "python3.12", "python3.11", "python3"):
        candidates += [shutil.which(name)]
        candidates += [os.path.join(d, name) for d in _LIKELY]
    reasons = []
    for path in dict.fromkeys(c for c in candidates if c and os.path.isfile(c)):
        path = os.path.abspath(path)
        problem = fit_to_serve(path)
        if problem is None:
            return path, reasons
        reasons.append(f"{path}: {problem}")
    return None, reasons


def check_start(python, data_dir):
    """Start the server as a client would and ask for initialize and tools/list; None if it
    answered both, else what went wrong."""
    env = dict(bare_environment(), FLOOD_MEMORY_DIR=data_dir)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "setup.py", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    try:
        done = subprocess.run([python, os.path.join(HERE, "server.py")], input=stdin,
                              capture_output=True, text=True, timeout=30, env=env, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"it did not run: {exc}"
    try:
        replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        tools = [t["name"] for t in replies[1]["result"]["tools"]]
        replies[0]["result"]["serverInfo"]
    except (ValueError, LookupError, TypeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"it did not answer initialize and tools/list (exit {done.returncode}: {last})"
    if len(tools) != 5:
        return f"it listed {len(tools)} tools instead of 5"
    return None


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


def remote_config(url):
    """The .mcp.json entry for the remote server: Claude Code fills in ${...} from its own
    environment, so the token stays out of a file that is shared through version control."""
    entry = {"type": "http", "url": url,
             "headers": {"Authorization": f"Bearer ${{{TOKEN_VARIABLE}}}"}}
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
    print(f"Data directory: {os.path.expanduser(data_dir)} (memory.db is ready, readable by "
          f"you only)")

    if not args.no_tests and run_tests() != 0:
        print("setup.py: the tests failed; fix that before connecting a client.", file=sys.stderr)
        return 1

    python, reasons = interpreter()
    if python is None:
        print("setup.py: found no Python 3.11+ with SQLite full-text search that a client "
              "could start:\n  " + "\n  ".join(reasons), file=sys.stderr)
        return 1
    for reason in reasons:
        print(f"Not using {reason}")
    problem = check_start(python, data_dir)
    if problem is not None:
        print(f"setup.py: the server does not start as a client would start it "
              f"({python} {os.path.join(HERE, 'server.py')}, with only HOME and "
              f"PATH=/usr/bin:/bin): {problem}", file=sys.stderr)
        return 1
    print(f"Checked: {python} starts the server with a desktop app's bare environment, and it "
          f"answers initialize and tools/list.")

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
    print(f"""== Remote (HTTP) server, optional. On the machine that keeps the memories, start it
   with a secret token of at least 32 characters (this one is freshly generated; make
   another with: {shell_quote(python)} -c "import secrets; print(secrets.token_urlsafe(32))"):
{TOKEN_VARIABLE}={token} FLOOD_MEMORY_DIR={shell_quote(data_dir)} {shell_quote(python)} {shell_quote(os.path.join(HERE, "server_remote.py"))}

   On each client, set the same token in the environment Claude Code starts from (for
   example in ~/.zshrc or ~/.bashrc):
export {TOKEN_VARIABLE}={token}

   then, with HOST replaced by the server machine's name or address, either, for every
   project (your shell writes the token into ~/.claude.json, which stays on this machine):
claude mcp add --transport http --scope user {NAME} {url} --header "Authorization: Bearer ${TOKEN_VARIABLE}"

   or in a project's .mcp.json, which Claude Code fills in from that variable, so the file
   can be committed without the secret:
{json.dumps(remote_config(url), indent=2)}

   Claude Desktop does not expand ${{...}} in its configuration: a token there must be
   written out in full, so keep that file to yourself. Without a token the server is open
   to anyone who can reach it, so it then listens on 127.0.0.1 only. Put it behind HTTPS
   (a reverse proxy) before it crosses a network you do not trust: a bearer token over
   plain HTTP can be read on the way.
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
