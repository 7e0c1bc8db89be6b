"""Set up Flood Memory on this machine: data directory, test run, client configuration.

    python3 setup.py             # all three (on Windows: py setup.py)
    python3 setup.py --no-tests  # skip the test run (--tests: run it though it passed before)
    python3 setup.py --client codex  # only what registers it in one client (see --help)
    python3 setup.py --client codex --install    # register it there (--uninstall: undo)
    python3 setup.py --bundle    # only write flood-memory.mcpb, a Claude Desktop extension

The tests run once for each content of the checkout's five Python files and each Python: a
pass is recorded in the person's cache folder, and a later run with the same files says so
and skips them.

Before anything else, it starts the server exactly as a client will (the same command, in
the bare environment a desktop app gives its servers) and checks that the server answers.
Without --install it changes nothing outside the data directory and that record: the client
configuration is printed, for you to paste where it says, with commands in the shell of this
system (PowerShell on Windows); at a terminal, it then offers to add the server to each
client it finds here.

--install registers the server in one client: through the client's own command where the
client keeps its configuration itself (Claude Code, Gemini CLI); else in the client's file,
read and changed as text (everything else in it kept as it was, comments included), the
result checked by reading it back, written beside the file and renamed over it, a copy of
the file as it was kept under a new name.

What differs between macOS, Windows and Linux is decided by small functions that take the
system (platform.system()) and its environment as arguments, so that the tests can play
each system on any other.
"""

import argparse
import codecs
import contextlib
import glob
import hashlib
import itertools
import json
import ntpath
import os
import platform
import posixpath
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "flood-memory"
MIN_PYTHON = (3, 11)
TOKEN_VARIABLE = "FLOOD_MEMORY_AUTH_TOKEN"
CONFIG_NAME = "claude_desktop_config.json"

# What an interpreter must do for the server: be new enough and have SQLite with FTS5.
_PROBE = ("import sys, sqlite3; sqlite3.connect(':memory:').execute("
          "'CREATE VIRTUAL TABLE t USING fts5(x)'); print(*sys.version_info[:2])")

# Newest first: the interpreters looked for when the one running setup is not fit to serve.
_VERSIONS = ("3.14", "3.13", "3.12", "3.11")

# Where Python 3.11+ often lives on macOS and Linux.
_LIKELY = ["/opt/homebrew/bin", "/usr/local/bin", "/usr/bin",
           "/Library/Frameworks/Python.framework/Versions/Current/bin"]


# ----------------------------------------------------------------------------- interpreter


def bare_environment(system, environ):
    """The environment a GUI app (Claude Desktop) gives the servers it starts: no shell
    profile, so no PATH additions (pyenv, Homebrew, virtualenvs). On Windows it has been
    seen to pass little more than the configuration's own env block: no USERPROFILE."""
    if system == "Windows":
        root = environ.get("SYSTEMROOT", r"C:\Windows")
        return {"SYSTEMROOT": root, "PATH": ntpath.join(root, "System32")}
    return {"HOME": environ.get("HOME") or os.path.expanduser("~"), "PATH": "/usr/bin:/bin"}


def describe_environment(env):
    """`env` in words: "only HOME and PATH=/usr/bin:/bin"."""
    return "only " + " and ".join(f"PATH={v}" if k == "PATH" else k for k, v in env.items())


def fit_to_serve(python, env):
    """Why `python` cannot run the server when started with the environment `env`, or None
    if it can."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True,
                             timeout=30, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"it does not start ({exc})"
    parts = out.stdout.split()
    if out.returncode != 0 or len(parts) != 2:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return f"it cannot use SQLite's full-text search ({last})"
    if tuple(map(int, parts)) < MIN_PYTHON:
        return f"it is Python {'.'.join(parts)}, older than {'.'.join(map(str, MIN_PYTHON))}"
    return None


def ask_launcher(version):
    """The interpreter the Windows py launcher starts for `version` ("3.13"), or None."""
    launcher = shutil.which("py")
    if launcher is None:
        return None
    try:
        out = subprocess.run([launcher, f"-{version}", "-c", "import sys; print(sys.executable)"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def candidates(system, running, which, launcher):
    """Interpreters to try, best first: `running` (the one running setup), then those that
    `which` (shutil.which) finds by name and, on Windows, that `launcher` (ask_launcher)
    finds per version: python.org's installers register with the py launcher, while
    `python3` there is often the Microsoft Store's stub."""
    found = [running]
    if system == "Windows":
        found += [launcher(v) for v in _VERSIONS] + [which("python"), which("python3")]
    else:
        for name in [f"python{v}" for v in _VERSIONS] + ["python3"]:
            found += [which(name)] + [posixpath.join(d, name) for d in _LIKELY]
    return list(dict.fromkeys(path for path in found if path))


def store_alias(system, path):
    """Whether `path` is a Microsoft Store app alias (under WindowsApps): Python installed
    from the Store runs from one, and without it Windows puts one there that only offers to
    install Python (run with arguments, it says "Python was not found" and opens nothing)."""
    return system == "Windows" and "windowsapps" in path.lower().replace("/", "\\").split("\\")


def interpreter(system, env, paths):
    """An absolute path to the Python that clients should start the server with: the first
    of `paths` fit to serve. (None, reasons) if there is none.

    Each is tried, a Store app alias too: the check tells Python installed from the Store,
    which serves, from the alias that only offers to install it."""
    reasons = []
    for path in paths:
        if not os.path.isfile(path):
            continue
        path = os.path.abspath(path)
        problem = fit_to_serve(path, env)
        if problem is None:
            return path, reasons
        if store_alias(system, path):
            problem += ("; it is a Microsoft Store app alias (WindowsApps), and where no "
                        "Python is installed behind it, only offers to install one: install "
                        "Python 3.11+ from python.org or the Store")
        reasons.append(f"{path}: {problem}")
    return None, reasons


def check_start(python, data_dir, env):
    """Start the server as a client would, in the environment `env` plus the data
    directory, and ask for initialize and tools/list; then start it as an MCP 2026-07-28
    client does, with server/discover and a tools/call carrying _meta. None if it answered
    them all, else what went wrong."""
    env = dict(env, FLOOD_MEMORY_DIR=data_dir)
    done, replies = _served(python, env, [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "setup.py", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ])
    if done is None:
        return replies
    try:
        tools = [t["name"] for t in replies[1]["result"]["tools"]]
        replies[0]["result"]["serverInfo"]
    except (LookupError, TypeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"it did not answer initialize and tools/list (exit {done.returncode}: {last})"
    if len(tools) != 5:
        return f"it listed {len(tools)} tools instead of 5"
    # A recall by a tag no memory has: it changes nothing in the data directory.
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "setup.py", "version": "1"}}
    done, replies = _served(python, env, [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"_meta": meta, "name": "recall",
                    "arguments": {"tags": ["setup.py self-check, never a tag"]}}},
    ])
    if done is None:
        return replies
    try:
        discover, called = replies
        served = discover["result"]["supportedVersions"]
        called["result"]["structuredContent"]["results"]
    except (ValueError, LookupError, TypeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"it did not answer server/discover and a tools/call with _meta "
                f"(exit {done.returncode}: {last})")
    if "2026-07-28" not in served or called["result"]["isError"]:
        return f"it does not serve MCP 2026-07-28 as a client would use it (it serves {served})"
    return None


def _served(python, env, messages):
    """server.py started with `python` in `env`, given `messages` on its standard input:
    (the finished process, its replies), or (None, what went wrong)."""
    try:
        # Started from the file system's root: a client's working directory is its own.
        done = subprocess.run([python, os.path.join(HERE, "server.py")],
                              input="".join(json.dumps(m) + "\n" for m in messages),
                              capture_output=True, text=True, timeout=30, env=env,
                              cwd=os.path.abspath(os.sep))
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"it did not run: {exc}"
    try:
        return done, [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"it answered what is not JSON (exit {done.returncode}: {last})"


# ----------------------------------------------------------------------------- where things are


def desktop_config_files(system, environ, find):
    """The Claude Desktop configuration files to name, the one Claude reads first. `find` is
    glob.glob (a list of the paths a pattern matches).

    On Windows the installer of today is an MSIX package, which reads
    %LOCALAPPDATA%\\Packages\\Claude_*\\LocalCache\\Roaming\\Claude\\, and the older one
    %APPDATA%\\Claude\\: those that exist are named, the package's first; with neither, the
    package's if it is installed, else the older one.
    """
    if system == "Windows":
        profile = environ.get("USERPROFILE", r"C:\Users\you")
        local = environ.get("LOCALAPPDATA") or ntpath.join(profile, "AppData", "Local")
        roaming = environ.get("APPDATA") or ntpath.join(profile, "AppData", "Roaming")
        packages = sorted(find(ntpath.join(glob.escape(local), "Packages", "Claude_*")))
        msix = [ntpath.join(p, "LocalCache", "Roaming", "Claude", CONFIG_NAME) for p in packages]
        older = ntpath.join(roaming, "Claude", CONFIG_NAME)
        return [p for p in [*msix, older] if find(glob.escape(p))] or msix[:1] or [older]
    home = environ.get("HOME") or "~"
    if system == "Darwin":
        return [posixpath.join(home, "Library", "Application Support", "Claude", CONFIG_NAME)]
    return [posixpath.join(_config_home(environ), "Claude", CONFIG_NAME)]


def _config_home(environ):
    """Where Linux apps keep their settings (Electron's, VS Code's among them)."""
    return environ.get("XDG_CONFIG_HOME") or posixpath.join(environ.get("HOME") or "~",
                                                            ".config")


# Folders macOS keeps from apps the user has not allowed (TCC), under the home directory.
_PROTECTED = ("Documents", "Desktop", "Downloads", "Library/Mobile Documents")


def privacy_warnings(system, home, checkout=None, data_dir=None, python=None,
                     resolve=os.path.realpath):
    """Warnings for the checkout, the data directory and the interpreter the configuration
    names (a venv under ~/Documents) when they are in folders that macOS's privacy
    protection keeps from Claude Desktop: there the server works from Terminal, where setup
    runs, and fails with "Operation not permitted" when Claude starts it. A path is
    warned about, as given, when it or the path it resolves to (`resolve`) is in one."""
    if system != "Darwin":
        return []
    warnings = []
    for what, path, remedy in (
            ("This checkout", checkout, "Move the checkout out of it (to ~/flood-memory, for "
                                        "example) and run setup.py there"),
            ("The data directory", data_dir, "Set FLOOD_MEMORY_DIR to a folder outside it (the "
                                             "default, ~/flood/memory, is)"),
            ("The Python", python, "Run setup.py with a Python outside it (make a venv in "
                                   "~/flood-venv, for example)")):
        folder = path and (_protected_folder(home, path) or _protected_folder(home,
                                                                               resolve(path)))
        if folder:
            shown = "iCloud Drive" if folder.startswith("Library") else f"~/{folder}"
            warnings.append(
                f"{what} {path} is in {shown}, which macOS keeps from apps you have not "
                f"allowed: the server works from Terminal but fails with \"Operation not "
                f"permitted\" when Claude Desktop starts it. {remedy}, or allow Claude in "
                f"System Settings -> Privacy & Security -> Files and Folders.")
    return warnings


def _protected_folder(home, path):
    """The folder of _PROTECTED that `path` is in, or None."""
    for folder in _PROTECTED:
        protected = posixpath.join(home, folder)
        # APFS ignores case by default: ~/documents is ~/Documents.
        if (path.lower() + "/").startswith(protected.lower() + "/"):
            return folder
    return None


def privacy_note(system, data_dir, home):
    """What keeps memory.db private, as the data directory line says it."""
    if system != "Windows":
        return "readable by you only"
    if (data_dir.lower() + "\\").startswith(home.rstrip("\\").lower() + "\\"):
        return (f"private through the permissions of your user folder {home}: Windows has "
                f"no file modes to set")
    return (f"Windows has no file modes to set, so only the permissions of that folder keep "
            f"it private: inside your user folder {home} they do by default")


# ----------------------------------------------------------------------------- shells


class Posix:
    """Commands as a POSIX shell (zsh, bash) reads them."""

    name = "zsh or bash"

    @staticmethod
    def quote(word):
        if word and all(c.isascii() and (c.isalnum() or c in "/._-:=,+@%") for c in word):
            return word
        return "'" + word.replace("'", "'\\''") + "'"

    @classmethod
    def run(cls, words, env=None):
        """One command line: `words` (program first), after the variables `env`."""
        prefix = "".join(f"{k}={cls.quote(v)} " for k, v in (env or {}).items())
        return prefix + " ".join(map(cls.quote, words))

    @classmethod
    def set_for_later(cls, name, value):
        return f"export {name}={cls.quote(value)}"

    @staticmethod
    def bearer_header(token):
        # The shell fills in the variable that the export line before it sets.
        return f'"Authorization: Bearer ${TOKEN_VARIABLE}"'


class PowerShell:
    """Commands as PowerShell (the shell Windows opens) reads them."""

    name = "PowerShell"
    _BARE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./\\:=+")

    @classmethod
    def quote(cls, word):
        """`word` as one argument of a command."""
        # Bare words PowerShell reads as something else are quoted: "--" ends a script's
        # parameters (claude installed by npm is a script), a dash word holding a colon
        # takes the next word as its value, and 0x10 or 1kb arrive as numbers.
        dash = word.startswith("-")
        if word and set(word) <= cls._BARE and word != "--" and not word[0].isdigit() and \
                not word.startswith(".") and not (dash and (":" in word or word[1:2].isdigit())):
            return word
        return cls.string(word)

    @staticmethod
    def string(text):
        """`text` as a string literal, always quoted (a bare word in an expression is a
        command). In single quotes only quotes are special: PowerShell takes the
        typographic ones for ' too, and each is escaped by doubling it."""
        for mark in "'\u2018\u2019\u201a\u201b":
            text = text.replace(mark, mark + mark)
        return f"'{text}'"

    @classmethod
    def run(cls, words, env=None):
        """One command line: `words` (program first), after setting the variables `env`
        for this session. A quoted program needs the call operator &."""
        prefix = "".join(f"$env:{k} = {cls.string(v)}; " for k, v in (env or {}).items())
        line = " ".join(map(cls.quote, words))
        return prefix + ("& " + line if line.startswith("'") else line)

    @classmethod
    def set_for_later(cls, name, value):
        return (f"[Environment]::SetEnvironmentVariable({cls.string(name)}, "
                f"{cls.string(value)}, 'User')")

    @classmethod
    def bearer_header(cls, token):
        # Written out: $FLOOD_MEMORY_AUTH_TOKEN is an empty PowerShell variable, and the
        # variable set for later reaches only programs started after it.
        return cls.quote(f"Authorization: Bearer {token}")


class Cmd:
    """Commands as cmd.exe (the Command Prompt) reads them: it knows no single quotes, so
    PowerShell's lines fail there."""

    name = "cmd.exe"
    _BARE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./\\:=+@")

    @classmethod
    def quote(cls, word):
        """`word` as one argument: in double quotes unless it is plain. Inside them only % is
        special (a path holding %NAME% would be expanded), and a backslash before the
        closing quote would escape it for the program, so it is doubled."""
        if word and set(word) <= cls._BARE:
            return word
        ending = len(word) - len(word.rstrip("\\"))
        return '"' + word + "\\" * ending + '"'

    @classmethod
    def run(cls, words):
        return " ".join(map(cls.quote, words))


def shell_for(system):
    return PowerShell if system == "Windows" else Posix


# ----------------------------------------------------------------------------- configuration


def local_config(python, server, data_dir):
    entry = {"command": python, "args": [server], "env": {"FLOOD_MEMORY_DIR": data_dir}}
    return {"mcpServers": {NAME: entry}}


def remote_config(url):
    """The .mcp.json entry for the remote server: Claude Code fills in ${...} from its own
    environment, so the token stays out of a file that is shared through version control."""
    entry = {"type": "http", "url": url,
             "headers": {"Authorization": f"Bearer ${{{TOKEN_VARIABLE}}}"}}
    return {"mcpServers": {NAME: entry}}


def instructions(system, python, data_dir, config_files, token, here=HERE):
    """Everything setup prints once the server has started as a client will start it."""
    shell = shell_for(system)
    paths = ntpath if system == "Windows" else posixpath
    server, remote = paths.join(here, "server.py"), paths.join(here, "server_remote.py")
    config = json.dumps(local_config(python, server, data_dir), indent=2)
    also = "".join(f"\n   ({other} exists too; Claude reads the first.)"
                   for other in config_files[1:])
    url = "http://HOST:8080/mcp"
    claude_add = add_command("claude-code", python, server, data_dir)
    make_token = shell.run([python, "-c", "import secrets; print(secrets.token_urlsafe(32))"])
    where = ("for the programs you start from now on: open a new terminal for Claude Code"
             if system == "Windows" else "for example in ~/.zshrc or ~/.bashrc")
    in_cmd = f"\n   or in {Cmd.name} (the Command Prompt):\n{Cmd.run(claude_add)}" \
        if system == "Windows" else ""
    others = ", ".join(OTHER_CLIENTS)
    remote_add = shell.run(["claude", "mcp", "add", "--transport", "http", "--scope", "user",
                            NAME, url, "--header"]) + " " + shell.bearer_header(token)
    return f"""
== Claude Desktop: merge into {config_files[0]}{also}
   (Claude's Settings -> Developer -> Edit Config opens the file it reads.)
{config}

== Claude Code, for one project: merge into .mcp.json at the project's root
{config}

== Claude Code, for every project, in one line ({shell.name}):
{shell.run(claude_add)}{in_cmd}

== Remote (HTTP) server, optional. On the machine that keeps the memories, start it
   with a secret token of at least 32 characters (this one is freshly generated; make
   another with: {make_token}):
{shell.run([python, remote], {TOKEN_VARIABLE: token, "FLOOD_MEMORY_DIR": data_dir})}

   On each client, set the same token in the environment Claude Code starts from
   ({where}):
{shell.set_for_later(TOKEN_VARIABLE, token)}

   then, with HOST replaced by the server machine's name or address, either, for every
   project (the token is written into your .claude.json, which stays on this machine):
{remote_add}

   or in a project's .mcp.json, which Claude Code fills in from that variable, so the file
   can be committed without the secret:
{json.dumps(remote_config(url), indent=2)}

   Claude Desktop does not expand ${{...}} in its configuration: a token there must be
   written out in full, so keep that file to yourself. Without a token the server is open
   to anyone who can reach it, so it then listens on 127.0.0.1 only. Put it behind HTTPS
   (a reverse proxy) before it crosses a network you do not trust: a bearer token over
   plain HTTP can be read on the way.

Other clients: {setup_command(system)} --client NAME, with NAME one of {others}.
"""


# ----------------------------------------------------------------------------- one client


# What --client takes, and the client each name stands for.
CLIENTS = {
    "claude-desktop": "Claude Desktop",
    "claude-code": "Claude Code",
    "codex": "Codex CLI",
    "copilot": "GitHub Copilot CLI",
    "vscode": "VS Code",
    "cursor": "Cursor",
    "windsurf": "Windsurf",
    "gemini": "Gemini CLI",
}
# Those a bare `setup.py` leaves to --client.
OTHER_CLIENTS = [name for name in CLIENTS if not name.startswith("claude-")]


def setup_command(system):
    return ("py" if system == "Windows" else "python3") + " setup.py"


def add_command(client, python, server, data_dir):
    """The words of the command line with which `client`'s own CLI registers the local server
    for the user, in the form its `mcp add` takes."""
    env = f"FLOOD_MEMORY_DIR={data_dir}"
    return {
        "claude-code": ["claude", "mcp", "add", "--transport", "stdio", "--scope", "user", NAME,
                        "--env", env, "--", python, server],
        "codex": ["codex", "mcp", "add", NAME, "--env", env, "--", python, server],
        # Gemini CLI takes the server's command without --, so its options follow it.
        "gemini": ["gemini", "mcp", "add", "--scope", "user", NAME, python, server,
                   "--env", env],
        "copilot": ["copilot", "mcp", "add", NAME, "--env", env, "--", python, server],
    }[client]


def toml_string(text):
    """`text` as a TOML basic string. JSON's escapes are TOML's too; TOML also wants DEL
    escaped, and no surrogate escapes, so characters past ASCII are written as they are."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


# Seconds Codex waits for the server's first answer (its default is 10): a first start that
# upgrades a large memory.db takes longer.
CODEX_STARTUP_TIMEOUT = 60


def codex_table(python, server, data_dir):
    """The table of ~/.codex/config.toml that registers the local server."""
    return "\n".join([
        f"[mcp_servers.{NAME}]",
        f"command = {toml_string(python)}",
        f"args = [{toml_string(server)}]",
        f"env = {{ FLOOD_MEMORY_DIR = {toml_string(data_dir)} }}",
        f"startup_timeout_sec = {CODEX_STARTUP_TIMEOUT}",
    ])


def client_file(client, system, environ):
    """Where `client` reads the servers it starts for the user, on `system`."""
    if system == "Windows":
        paths, home = ntpath, environ.get("USERPROFILE") or r"C:\Users\you"
        roaming = environ.get("APPDATA") or ntpath.join(home, "AppData", "Roaming")
        code_user = ntpath.join(roaming, "Code", "User")
    else:
        paths, home = posixpath, environ.get("HOME") or "~"
        code_user = (posixpath.join(home, "Library", "Application Support", "Code", "User")
                     if system == "Darwin" else posixpath.join(_config_home(environ), "Code",
                                                               "User"))
    return {
        "claude-code": paths.join(home, ".claude.json"),
        "codex": paths.join(environ.get("CODEX_HOME") or paths.join(home, ".codex"),
                            "config.toml"),
        "gemini": paths.join(home, ".gemini", "settings.json"),
        "copilot": paths.join(environ.get("COPILOT_HOME") or paths.join(home, ".copilot"),
                              "mcp-config.json"),
        "vscode": paths.join(code_user, "mcp.json"),
        "cursor": paths.join(home, ".cursor", "mcp.json"),
        "windsurf": paths.join(home, ".codeium", "windsurf", "mcp_config.json"),
    }[client]


def client_config(client, python, server, data_dir):
    """The JSON document that registers the local server in `client`'s file."""
    entry = {"command": python, "args": [server], "env": {"FLOOD_MEMORY_DIR": data_dir}}
    if client == "vscode":
        return {"servers": {NAME: {"type": "stdio", **entry}}}
    if client == "copilot":
        return {"mcpServers": {NAME: {"type": "local", **entry, "tools": ["*"]}}}
    return {"mcpServers": {NAME: entry}}


# What to do after merging into an editor's file.
_EDITOR_NOTES = {
    "vscode": """\
   That is the mcp.json of your VS Code profile, which the command MCP: Open User
   Configuration opens; for one workspace, merge it into .vscode/mcp.json there.
   VS Code asks whether you trust the server the first time it starts it.""",
    "cursor": """\
   For one project, merge it into .cursor/mcp.json there instead. Restart Cursor; its
   settings then list flood-memory under MCP, to switch on if it is off.""",
    "windsurf": """\
   Restart Windsurf, or press Refresh in Cascade's MCP settings; flood-memory is then
   listed there with its five tools.""",
}


def client_instructions(client, system, python, data_dir, environ, config_files, here=HERE):
    """What setup prints for `client` (one of CLIENTS) alone: its own command line where it has
    one, the file to merge into and what to merge, and what the user must know besides."""
    shell = shell_for(system)
    server = (ntpath if system == "Windows" else posixpath).join(here, "server.py")
    title = CLIENTS[client]
    config = json.dumps(client_config(client, python, server, data_dir), indent=2)
    if client == "claude-desktop":
        also = "".join(f"\n   ({other} exists too; Claude reads the first.)"
                       for other in config_files[1:])
        return f"""
== {title}: merge into {config_files[0]}{also}
   (Claude's Settings -> Developer -> Edit Config opens the file it reads.)
{config}

   Then quit Claude Desktop (from its menu: closing the window leaves it running) and open
   it again; it reads the file when it starts.
"""
    where = client_file(client, system, environ)
    if client in ("vscode", "cursor", "windsurf"):
        return f"""
== {title}: merge into {where}
{config}

{_EDITOR_NOTES[client]}
"""
    line = shell.run(add_command(client, python, server, data_dir))
    if client == "claude-code":
        return f"""
== {title}, for every project, in one line ({shell.name}):
{line}

   That writes it into {where};
   `claude mcp list` then shows flood-memory Connected.
   For one project instead, merge into .mcp.json at the project's root:
{config}

   Claude Code starts a project's servers only once you approve them in an interactive
   `claude` there; until then `claude mcp list` shows flood-memory "Pending approval".
"""
    if client == "codex":
        seconds = CODEX_STARTUP_TIMEOUT
        kept = "little" if system == "Windows" else "only HOME, LANG, PATH, SHELL and TERM"
        return f"""
== {title}, in one line ({shell.name}):
{line}

   or merge this table into {where}:

{codex_table(python, server, data_dir)}

   Codex starts the server in the folder of config.toml, with {kept}
   from your environment plus the env given here: the absolute paths need no more.
   The table also lets the server take {seconds} seconds to start (startup_timeout_sec;
   Codex waits 10 otherwise), for a first start that upgrades a large memory.db.
   `codex mcp list` shows it, and /mcp in a Codex session its tools.
"""
    if client == "gemini":
        return f"""
== {title}, in one line ({shell.name}):
{line}

   That writes it into {where}.
   Gemini CLI starts servers, yours included, only in a folder you trust, and asks the
   first time you run `gemini` in one: `gemini mcp list` shows flood-memory Connected in a
   trusted folder, Disabled in any other.
"""
    return f"""
== {title}, in one line ({shell.name}):
{line}

   or merge into {where}:
{config}

   `copilot mcp list` shows it, and /mcp in a Copilot session whether it started.
"""


# ----------------------------------------------------------------------------- a client's file


class Refused(Exception):
    """Why setup.py leaves a client's file as it was: one line that names the file, and the
    line in it where one is to blame."""


# What --install merges into itself: the client's file and the key of its servers there.
SERVERS_KEY = {"claude-desktop": "mcpServers", "codex": "mcp_servers", "copilot": "mcpServers",
               "vscode": "servers", "cursor": "mcpServers", "windsurf": "mcpServers"}
# Those whose JSON may hold comments and trailing commas, as VS Code reads its settings (and
# Gemini CLI its own, which setup.py only reads).
COMMENTED = {"vscode", "cursor", "gemini"}
# The clients that keep their configuration in files they manage themselves, and their
# command, which --install runs instead of writing there.
OWN_COMMAND = {"claude-code": "claude", "gemini": "gemini"}


def _line(text, pos):
    return text.count("\n", 0, pos) + 1


def decode(data, path):
    """The text of a client's file and the byte order mark it starts with (b"" if none).
    UTF-16 (what Windows PowerShell 5 writes with > or Out-File) is refused, not mangled:
    the clients read UTF-8 (Codex says "invalid utf-8" and starts no server at all)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in data[:4]:
        raise Refused(f"{path} is UTF-16 text (as Windows PowerShell 5 writes with > or "
                      f"Out-File), not the UTF-8 its client reads: save it as UTF-8 (Notepad: "
                      f"File -> Save as, Encoding UTF-8) and run this again")
    bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    try:
        return data[len(bom):].decode("utf-8"), bom
    except UnicodeDecodeError as exc:
        line = data[len(bom):len(bom) + exc.start].count(b"\n") + 1
        raise Refused(f"{path}, line {line}: byte 0x{data[len(bom) + exc.start]:02x} is not "
                      f"UTF-8, the encoding its client reads") from None


# JSON's scalars; a string's escapes are JSON's, so that a token that matches reads as JSON.
_JSON_STRING = r'"(?>[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+"'
_JSON_SCALAR = (_JSON_STRING + r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
                r"|true|false|null")
# Every repeat below is possessive: it keeps no place to go back to for each character, so
# that a long string or comment costs nothing beyond its text. A group so repeated is atomic,
# (?>...)*+ not (?:...)*+: before Python 3.11.5 (Debian 12 has 3.11.2) an iteration that
# failed part way kept what it had read (CPython gh-106052). Python 3.11+ has them: the
# patterns are compiled only there, so that an older Python still starts setup.py to be
# told it is too old.
if sys.version_info >= MIN_PYTHON:
    _JSON_TOKEN = re.compile(r"(?P<space>[ \t\r\n]++)|(?P<comment>//[^\r\n]*+|"
                             r"/\*(?>[^*]|\*(?!/))*+\*/)|(?P<scalar>" + _JSON_SCALAR +
                             r")|(?P<mark>[{}\[\]:,])")
    _JSON_ANY_STRING = re.compile(r'"(?>[^"\\\x00-\x1f]|\\.)*+"')
    # Runs of items or members a skipped value holds, each a scalar (or {} or []) and a
    # comma, read at once; of members, until the file's indentation step is known, only
    # those that do not start a line (JsonText.indentation reads those): a minified file's.
    _JSON_FLAT = _JSON_SCALAR + r"|\{[ \t\r\n]*+\}|\[[ \t\r\n]*+\]"
    _JSON_ITEMS = re.compile(r"(?>[ \t\r\n]*+(?:" + _JSON_FLAT + r")[ \t\r\n]*+,)*+")
    _JSON_MEMBERS, _JSON_MEMBERS_IN_A_LINE = (re.compile(
        r"(?>" + lead + _JSON_STRING + r"[ \t\r\n]*+:[ \t\r\n]*+(?:" + _JSON_FLAT +
        r")[ \t\r\n]*+,)*+") for lead in (r"[ \t\r\n]*+", r"[ \t]*+"))
    # A valid TOML document's strings (basic, literal, multi-line), each to its end.
    _TOML_STRINGS = {quote: re.compile(pattern, re.DOTALL) for quote, pattern in (
        ('"', r'"(?>[^"\\]|\\.)*+"'), ("'", r"'[^']*+'"),
        ('"""', r'"""(?>[^"\\]|\\.|"(?!""))*+"""'), ("'''", r"'''(?>[^']|'(?!''))*+'''"))}
_TOML_PLAIN = re.compile(r"[^#\"'\[\]{}=\n]*")
_TOML_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INDENT = re.compile(r"[ \t]*")

# How deep a client's JSON may nest: far past any configuration, and short of Python's
# recursion limit.
_JSON_DEPTH = 200

# How JsonText reads a value: checked and skipped; as Python values (the flood-memory
# entry); as the top object or the servers, keeping where one member is; as another server's
# entry, its args and each of them, read only as far as starts_server looks.
_SKIP, _VALUE, _TOP, _SERVERS, _ENTRY, _ARGS, _ARG = range(7)


class JsonObject:
    """The top object of a JSON text, or its servers: where it starts ({) and ends (after
    }); the members kept, each (key, where the key starts, where its value starts and ends,
    where the comma after it is or None, the value): the member `kept` (the servers, or
    flood-memory), the one before it and the last; the number of members (`count`), the
    place of the member kept among them (None if it is not there) and its value (`value`);
    a digest of how the other members are written (`others`); of the servers, the names of
    those that start this checkout's server.py (`starting`)."""

    def __init__(self, start, kept):
        self.start, self.end, self.members, self.kept = start, None, [], kept
        self.count, self.place, self.value = 0, None, None
        self.others, self.starting = hashlib.sha256(), []

    def member(self, key):
        """The index of the member `key`, or None."""
        return next((i for i, m in enumerate(self.members) if m[0] == key), None)


class JsonText:
    """A client's JSON file read as text, with where the members of its top object and of
    its servers (the top object's member `key`) are, so that one member can be added,
    replaced or taken out by editing the text around it: the other members, their order,
    indentation, line endings and comments stay as they were.

    Of all the values, only the flood-memory entry is read as Python values, and the args
    of the other servers, for starts_server to tell those that start `server`; every
    other value is checked and skipped, so that reading costs little beyond the text
    however many values it holds. `unit` is the file's indentation step, found at the first
    member that starts a line of its own, deeper than the line of its object; None if there
    is none.

    `commented` allows comments and trailing commas (JSON with comments, as VS Code reads
    it); otherwise the text must be plain JSON. `key` twice at the top, a server twice, or a
    key twice in the flood-memory entry is refused: the client would read one of the two
    and setup.py might change the other. An empty text (or one of comments only) is {}."""

    def __init__(self, text, path, commented, key, server=None):
        self.text, self.path, self.commented, self.key = text, path, commented, key
        self.server = server
        self.comments, self.pos, self.ahead, self.end = [], 0, None, 0
        self.quiet = 0  # in what no edit goes into: comments there are not kept
        self.unit, self.line, self.seen, self.indent = None, 0, 0, _INDENT.match(text)[0]
        self.top = None
        first = self.peek()
        if first is not None:
            self.top = self.value(0, _TOP, "")
            if self.peek() is not None:
                self.fail(self.peek()[1], "more text after the end of the JSON document")
            if not isinstance(self.top, JsonObject):
                self.fail(first[1], "the document is not a JSON object ({...})")

    @property
    def servers(self):
        """The servers' JsonObject; None if there are none or they are not an object (a
        value that is not an object is read as None: top.place tells that the key is there)."""
        return None if self.top is None else self.top.value

    def fail(self, pos, what):
        raise Refused(f"{self.path}, line {_line(self.text, pos)}: {what}")

    def peek(self):
        """The next token but for space and comments, (kind, start, end); None at the end."""
        text = self.text
        while self.ahead is None and self.pos < len(text):
            found = _JSON_TOKEN.match(text, self.pos)
            if found is None:
                string = _JSON_ANY_STRING.match(text, self.pos)
                self.fail(self.pos, "a comment that is never closed" if
                          text.startswith("/*", self.pos) else
                          f"{string[0][:40]} is not a valid JSON string" if string else
                          "a string not closed on its line" if text[self.pos] == '"' else
                          f"unexpected {text[self.pos]!r}")
            kind, start, self.pos = found.lastgroup, found.start(), found.end()
            if kind == "comment":
                if not self.commented:
                    self.fail(start, "a comment, which is not JSON (its client reads plain "
                                     "JSON)")
                if not self.quiet:
                    self.comments.append((start, self.pos))
            elif kind != "space":
                self.ahead = (kind, start, self.pos)
        return self.ahead

    def take(self, expected):
        token = self.peek()
        if token is None:
            self.fail(len(self.text), f"the text ends where {expected} should follow")
        self.ahead, self.end = None, token[2]
        return token

    def closes(self, closing, after):
        """Whether the next token closes the object or array, after `after` members or
        items (a comma before it only where comments are allowed); if so it is taken."""
        token = self.peek()
        if token is None or self.text[token[1]] != closing:
            return False
        if after and not self.commented:
            self.fail(token[1], f"a comma before {closing}, which is not JSON (its client "
                                f"reads plain JSON)")
        self.take(closing)
        return True

    def skip(self, skipping, run):
        """When `skipping`, take the run of items or members `run` matches next: whether
        there was one."""
        if not skipping or self.ahead is not None:
            return False
        start, self.pos = self.pos, run.match(self.text, self.pos).end()
        return self.pos > start

    def value(self, depth, mode, outer):
        kind, start, end = self.take("a value")
        if depth > _JSON_DEPTH:
            self.fail(start, f"nested more than {_JSON_DEPTH} levels deep")
        if kind == "scalar":
            if mode == _VALUE or mode == _ARG and self.text[start] == '"':
                try:
                    value = json.loads(self.text[start:end])
                except ValueError:  # an integer longer than int() reads
                    self.fail(start, f"a number of {end - start} digits, more than setup.py "
                                     f"reads")
                return value
            return None
        if self.text[start] == "{":
            return self.object(start, depth, _SKIP if mode in (_ARGS, _ARG) else mode, outer)
        if self.text[start] != "[":
            self.fail(start, f"expected a value, found {self.text[start]}")
        items = [] if mode in (_VALUE, _ARGS) else None
        inner = _VALUE if mode == _VALUE else _ARG if mode == _ARGS else _SKIP
        self.quiet += mode != _VALUE
        count = 0
        while not self.closes("]", count + self.skip(inner == _SKIP, _JSON_ITEMS)):
            item = self.value(depth + 1, inner, outer)
            if items is not None:
                items.append(item)
            count += 1
            _, mark, end = self.take(", or ]")
            if self.text[mark] == "]":
                break
            if self.text[mark] != ",":
                self.fail(mark, f"expected , or ] after an item, found "
                                f"{self.text[mark:end][:40]}")
        self.quiet -= mode != _VALUE
        return items

    def object(self, start, depth, mode, outer):
        text = self.text
        keeping = mode in (_TOP, _SERVERS)
        obj = (JsonObject(start, self.key if mode == _TOP else NAME) if keeping else
               {} if mode in (_VALUE, _ENTRY) else None)
        self.quiet += not keeping and mode != _VALUE
        first, count, before = {}, 0, None
        while not self.closes("}", count + self.skip(mode == _SKIP, _JSON_MEMBERS_IN_A_LINE
                                                     if self.unit is None else _JSON_MEMBERS)):
            kind, key_start, key_end = self.take("a key")
            if text[key_start] != '"':
                self.fail(key_start, f"expected a key in double quotes, found "
                                     f"{text[key_start:key_end][:40]}")
            key = None if mode == _SKIP else json.loads(text[key_start:key_end])
            if mode in (_SERVERS, _VALUE) or mode == _TOP and key == self.key:
                if key in first:
                    self.fail(key_start, f"the key {json.dumps(key)} is there twice in one "
                                         f"object (first on line {_line(text, first[key])})")
                first[key] = key_start
            inner_outer = self.indentation(key_start, outer) if self.unit is None else ""
            _, colon, _ = self.take(":")
            if text[colon] != ":":
                self.fail(colon, f"expected : after the key {text[key_start:key_end][:40]}")
            value_start = self.peek()[1] if self.peek() else colon
            inner = (_VALUE if mode == _VALUE else
                     _ARGS if mode == _ENTRY and key == "args" else
                     (_SERVERS if mode == _TOP else _VALUE) if keeping and key == obj.kept else
                     _ENTRY if mode == _SERVERS and self.server else _SKIP)
            value = self.value(depth + 1, inner, inner_outer)
            value_end = self.end
            _, mark, _ = self.take(", or }")
            comma = mark if text[mark] == "," else None
            member = (key, key_start, value_start, value_end, comma, value)
            if mode == _VALUE or mode == _ENTRY and key == "args":
                obj[key] = value
            elif keeping and key == obj.kept:
                obj.members = [before, member] if before else [member]
                obj.place, obj.value = count, value
            elif keeping:
                for piece in _pieces(text, key_start, value_end):
                    obj.others.update(piece.encode())
                obj.others.update(b"\0")
                if self.server and starts_server(value, self.server):
                    obj.starting.append(key)
            before, count = member, count + 1
            if text[mark] == "}":
                break
            if comma is None:
                self.fail(mark, f"expected , or }} after the value of "
                                f"{text[key_start:key_end][:40]}")
        self.quiet -= not keeping and mode != _VALUE
        if keeping:
            obj.end, obj.count = self.end, count
            if before and before not in obj.members:
                obj.members.append(before)
        return obj

    def indentation(self, pos, outer):
        """The white space that starts the line of the key at `pos` (asked in order), which
        gives the indentation step if that key starts its line, deeper than `outer`."""
        newline = self.text.rfind("\n", self.seen, pos)
        if newline >= 0:
            self.line = newline + 1
            self.indent = _INDENT.match(self.text, self.line)[0]
        self.seen, lead = pos, self.indent
        if self.line + len(lead) == pos and len(lead) > len(outer) and lead.startswith(outer):
            self.unit = lead[len(outer):]
        return lead


def toml_statements(text):
    """The statements of a valid TOML document, one by one: (kind, start, end, key, comments)
    with kind "table" ([header]), "array" ([[header]]), "pair" (key = value) or "other" (a
    blank or comment line); start and end cover whole lines, the line break included; key
    the key's parts as tomllib reads them (a pair's relative to its table); comments the
    (start, end) of each comment within. Multi-line strings and arrays are one statement."""
    import tomllib
    pos = 0
    while pos < len(text):
        start, depth, comments, equals = pos, 0, [], None
        while pos < len(text):
            c = text[pos]
            if c == "#":
                end = text.find("\n", pos)
                end = len(text) if end < 0 else end
                comments.append((pos, end))
                pos = end
            elif c in "\"'":
                pos = _toml_string_end(text, pos)
            elif c in "[{":
                depth, pos = depth + 1, pos + 1
            elif c in "]}":
                depth, pos = depth - 1, pos + 1
            elif c == "=" and equals is None and depth == 0:
                equals, pos = pos, pos + 1
            elif c == "\n" and depth == 0:
                pos += 1
                break
            else:
                pos = _TOML_PLAIN.match(text, pos + 1).end()
        head = text[start:comments[0][0] if comments else pos].strip()
        if not head:
            yield "other", start, pos, None, comments
        elif head.startswith("["):
            kind = "array" if head.startswith("[[") else "table"
            yield kind, start, pos, _toml_key(tomllib.loads(head)), comments
        else:
            key = text[start:equals].strip()  # most are bare: read as tomllib would
            yield "pair", start, pos, (key,) if _TOML_BARE_KEY.fullmatch(key) else _toml_key(
                tomllib.loads(key + " = 0")), comments


def _toml_string_end(text, pos):
    """Where the TOML string that starts at `pos` ends, after its closing quotes."""
    quote = text[pos] * (3 if text.startswith(text[pos] * 3, pos) else 1)
    at = _TOML_STRINGS[quote].match(text, pos).end()
    # Up to two more quotes are a multi-line string's own: """say "hi"""" ends after all five.
    for _ in range(2 if len(quote) == 3 else 0):
        if text.startswith(quote[0], at):
            at += 1
    return at


def _toml_key(parsed):
    """The parts of the one key a one-key document (`[a.b]` or `a.b = 0`) holds."""
    key = []
    while isinstance(parsed, (dict, list)) and parsed:
        if isinstance(parsed, list):
            parsed = parsed[-1]
            continue
        (name, parsed), = parsed.items()
        key.append(name)
    return tuple(key)


# ----------------------------------------------------------------------------- changing it


def _line_start(text, pos):
    return text.rfind("\n", 0, pos) + 1


def _leading(text, pos):
    """The white space that starts the line holding `pos`."""
    start = _line_start(text, pos)
    return text[start:start + len(text[start:pos]) - len(text[start:pos].lstrip(" \t"))]


def _alone(text, pos):
    """Whether only white space precedes `pos` on its line."""
    return text[_line_start(text, pos):pos].strip(" \t") == ""


def _skip_blanks(text, pos):
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


class JsonEdit:
    """Changes to one member of a JsonText, as edits of its text: (start, end, new text)."""

    def __init__(self, doc):
        self.doc, self.text = doc, doc.text
        self.nl = "\r\n" if "\r\n" in self.text else "\n"
        self.unit = doc.unit

    def render(self, value, indent, unit):
        if unit is None:
            return json.dumps(value, ensure_ascii=False)
        return json.dumps(value, indent=unit, ensure_ascii=False).replace("\n", self.nl + indent)

    def insert(self, obj, key, value):
        """Edits that add the member `key` at the end of `obj`."""
        text, nl = self.text, self.nl
        outer = _leading(text, obj.start)
        if not obj.members:
            # An empty object opens up, in the file's indentation, or two spaces as the
            # clients write theirs.
            indent = outer + (self.unit or "  ")
            member = json.dumps(key, ensure_ascii=False) + ": " + self.render(
                value, indent, self.unit or "  ")
            if text[obj.start + 1:obj.end - 1].strip() == "":
                return [(obj.start + 1, obj.end - 1, nl + indent + member + nl + outer)]
            return [(obj.start + 1, obj.start + 1, nl + indent + member)]
        _, key_start, _, value_end, comma, _ = obj.members[-1]
        after = value_end if comma is None else comma + 1
        line_end = _skip_blanks(text, after)
        for start, end in self.doc.comments:
            if start == line_end and "\n" not in text[start:end]:
                line_end = _skip_blanks(text, end)
        multiline = "\n" in text[obj.start:obj.end] and self.unit is not None
        if multiline and _alone(text, key_start) and (line_end == len(text) or
                                                      text[line_end] in "\r\n"):
            indent = _leading(text, key_start)
            member = json.dumps(key, ensure_ascii=False) + ": " + self.render(value, indent,
                                                                               self.unit)
            edits = [(value_end, value_end, ",")] if comma is None else []
            return edits + [(line_end, line_end, nl + indent + member + ("" if comma is None
                                                                         else ","))]
        # The object's members share a line: the new one joins them there.
        member = json.dumps(key, ensure_ascii=False) + ": " + self.render(value, "", None)
        if comma is None:
            return [(value_end, value_end, ", " + member)]
        return [(after, after, " " + member + ",")]

    def replace(self, obj, index, value):
        _, key_start, value_start, value_end, _, _ = obj.members[index]
        multiline = "\n" in self.text[obj.start:obj.end] and self.unit is not None
        return [(value_start, value_end, self.render(value, _leading(self.text, key_start),
                                                     self.unit if multiline else None))]

    def remove(self, obj, index):
        """Edits that take out the member at `index`, with its line when it has one alone,
        and the comma that went with it."""
        text = self.text
        _, key_start, _, value_end, comma, _ = obj.members[index]
        alone = _alone(text, key_start)
        begin = _line_start(text, key_start) if alone else key_start
        if comma is not None:
            end = _skip_blanks(text, comma + 1)
            if alone and (end == len(text) or text[end] in "\r\n"):
                end += 2 if text.startswith("\r\n", end) else 1 if end < len(text) else 0
                return [(begin, end, "")]
            return [(key_start, end, "")]
        if index == 0:
            inside = text[obj.start + 1:obj.end - 1]
            if inside.strip() == text[key_start:value_end].strip():
                return [(obj.start + 1, obj.end - 1, "")]
            return [(key_start, value_end, "")]
        previous_comma = obj.members[index - 1][4]
        if alone:  # from the end of the line before, so that the closing } keeps its own
            begin -= 2 if text[max(0, begin - 2):begin] == "\r\n" else 1
        if not alone or previous_comma >= begin:
            return [(previous_comma, value_end, "")]
        return [(previous_comma, previous_comma + 1, ""), (begin, value_end, "")]


def apply_edits(text, edits, comments, path, what):
    """`text` with `edits` made; Refused if one would take out a comment (in `comments`)."""
    for start, end, _ in edits:
        for c_start, c_end in comments:
            if c_start < end and c_end > start:
                raise Refused(f"{path}, line {_line(text, c_start)}: a comment there would "
                              f"be lost {what}")
    # In order; edits at one place are made in the order given. The text is cut a megabyte
    # at a time: each piece takes as few bytes a character as its own characters need, where
    # a large piece would take as many as the widest character of the text.
    pieces, pos = [], 0
    for start, end, new in sorted(edits, key=lambda edit: edit[0]):
        pieces += [*_pieces(text, pos, start), new]
        pos = max(pos, end)
    return "".join([*pieces, *_pieces(text, pos, len(text))])


def _encode(bom, text):
    """The bytes of `text` in UTF-8 after the byte order mark `bom`, encoded a megabyte at a
    time."""
    return bom + b"".join(piece.encode() for piece in _pieces(text))


def _pieces(text, start=0, end=None):
    """text[start:end], a megabyte at a time."""
    end = len(text) if end is None else end
    for at in range(start, end, 1 << 20):
        yield text[at:min(at + (1 << 20), end)]


def json_changed(client, text, path, entry, server, bare=False):
    """What `text`, the JSON of `client`'s file at `path`, becomes with the flood-memory entry
    set to `entry` (taken out when None; with the servers too when it was their only one,
    if `bare`): (new text, the entry that was there or None, the other servers there that
    start `server`, whether flood-memory is the only server)."""
    key = SERVERS_KEY[client]
    doc = JsonText(text, path, client in COMMENTED, key, server)
    servers = doc.servers
    if doc.top is not None and doc.top.place is not None and not isinstance(servers,
                                                                             JsonObject):
        at = doc.top.members[doc.top.member(key)][2]
        raise Refused(f"{path}, line {_line(text, at)}: \"{key}\" is not an object ({{...}}) "
                      f"of servers")
    there = servers is not None and servers.place is not None
    was, others = (servers.value, servers.starting) if servers else (None, [])
    alone = there and servers.count == 1
    if (entry is None and not there) or (entry is not None and there and was == entry):
        return text, was, others, alone
    gone = bare and alone and entry is None
    if doc.top is None:
        nl = "\r\n" if "\r\n" in text else "\n"
        new = json.dumps({key: {NAME: entry}}, indent=2, ensure_ascii=False)
        changed = (text.rstrip() + nl if text.strip() else "") + new.replace("\n", nl) + nl
    else:
        edit, top = JsonEdit(doc), doc.top
        index = top.member(key)
        if index is None:
            edits = edit.insert(top, key, {NAME: entry})
        else:
            obj = top.members[index][5]
            at = obj.member(NAME)
            if gone:
                edits = edit.remove(top, index)
            elif entry is None:
                edits = edit.remove(obj, at)
            elif at is None:
                edits = edit.insert(obj, NAME, entry)
            else:
                edits = edit.replace(obj, at, entry)
        changed = apply_edits(text, edits, doc.comments, path, "with the flood-memory entry")
    # The check before anything is written: the new text, read back, holds what the file
    # held with this one change: the other members of the top object and of the servers
    # written as they were, in the same order, and the servers and the entry in their place.
    def outline(obj):
        if not isinstance(obj, JsonObject):
            return obj, nothing, 0, None
        return json.dumps(obj.value) if obj.kept == NAME else "", obj.others.digest(), \
            obj.count, obj.place

    nothing = hashlib.sha256().digest()
    _, others_at_top, count, place = outline(doc.top)
    _, other_servers, n, at = outline(servers)
    expected = (("", others_at_top, count - 1, None), (None, nothing, 0, None)) if gone else (
        ("", others_at_top, count + (place is None), count if place is None else place),
        (json.dumps(entry), other_servers, n - (entry is None) + (at is None),
         None if entry is None else n if at is None else at))
    try:
        got = JsonText(changed, path, client in COMMENTED, key)
    except Refused:
        got = None
    if got is None or (outline(got.top), outline(got.servers)) != expected:
        raise Refused(f"{path}: setup.py could not make the change without changing "
                      f"something else there")
    return changed, was, others, alone


TOML_MOST = 4 << 20  # characters of a config.toml setup.py reads (see toml_changed)


def toml_changed(text, path, table, server, bare=False):
    """What `text`, the config.toml at `path`, becomes with the table of flood-memory set to
    `table` (its text; taken out when None, with mcp_servers too when it was the only
    server, if `bare`), whatever form the old one had (a table with subtables, dotted keys,
    an inline table): (new text, the entry that was there or None, the other servers there
    that start `server`, whether flood-memory is the only server). The new table takes the
    old one's place when that was a [table], else it goes at the end."""
    import tomllib
    if len(text) > TOML_MOST:  # tomllib holds the whole document, at up to 12x its size
        raise Refused(f"{path} is {len(text) / 2**20:.1f} MB, more than the {TOML_MOST >> 20} "
                      f"MB setup.py reads of a config.toml (Codex's own is a few KB)")
    document = _toml_read(text, path)
    servers = document.get("mcp_servers", {})
    # Each block of ours: [start, end, the statement before, the one after, its last] for a
    # [table], [start, end] for a pair of keys in another table.
    ours, comments, current, block, previous, survives, first = [], [], (), None, None, False, None
    for kind, start, end, key, inside in toml_statements(text):
        if block is not None and block[4] is previous:
            block[3] = (kind, start, end, inside)
        full = current + key if kind == "pair" else key or ()
        if full[:1] == ("mcp_servers",):
            first = start if first is None else first
            survives = survives or full[:2] != ("mcp_servers", NAME)
        if kind in ("table", "array"):
            current, block = key, None
            if key[:2] == ("mcp_servers", NAME):
                block = [start, end, previous, None, None]
                ours.append(block)
        elif kind == "pair" and block is not None:
            block[1] = end
        elif kind == "pair" and full[:2] == ("mcp_servers", NAME):
            ours.append([start, end])
        elif kind == "pair" and full == ("mcp_servers",) and isinstance(servers, dict):
            raise Refused(f"{path}, line {_line(text, start)}: mcp_servers is written as one "
                          f"inline table, which setup.py cannot add to or take from without "
                          f"rewriting it")
        if block is not None or full[:2] == ("mcp_servers", NAME):
            comments += inside  # only an edit of ours could take one out
        previous = (kind, start, end, inside)
        if block is not None and kind != "other":
            block[4] = previous
    if not isinstance(servers, dict):
        raise Refused(f"{path}, line {_line(text, first)}: mcp_servers is not a table of "
                      f"servers")
    was = servers.get(NAME)
    others = [name for name, other in servers.items()
              if name != NAME and starts_server(other, server)]
    alone = list(servers) == [NAME]
    entry = None if table is None else tomllib.loads(table)["mcp_servers"][NAME]
    if (table is None and NAME not in servers) or (table is not None and was == entry):
        return text, was, others, alone
    nl = "\r\n" if "\r\n" in text else "\n"
    in_place = ours[0][0] if table and ours and len(ours[0]) > 2 else None
    new = None if table is None else table.replace("\n", nl) + nl
    gone = table is None and not survives and bare
    if table is None and not survives and not bare:
        new, in_place = "[mcp_servers]" + nl, ours[0][0]  # the servers stay, as {}
    # What the text must hold read back: this one change, and all else as it was; as a
    # digest, so that a large file is not held read twice over.
    document["mcp_servers"] = {name: value for name, value in servers.items() if name != NAME}
    if entry is not None:
        document["mcp_servers"] = {**servers, NAME: entry}
    if gone:
        del document["mcp_servers"]
    expected, document, servers = _toml_digest(document), None, None
    for block in ours:
        # A [table] taken out takes the blank line that set it apart along: the one before
        # it, or after it at the top of the file.
        if len(block) == 2 or block[0] == in_place:
            continue
        before, after = block[2], block[3]
        if before and before[0] == "other" and not before[3]:
            block[0] = before[1]
        elif not before and after and after[0] == "other" and not after[3]:
            block[1] = after[2]
        if block[1] == len(text) and not text.endswith("\n") and block[0]:
            block[0] -= 2 if text.endswith("\r\n", 0, block[0]) else 1  # no final newline
    edits = [(block[0], block[1], "") for block in ours]
    if new is not None and in_place is not None:
        edits.append((in_place, in_place, new))
    elif new is not None:
        ends = text.endswith("\n") or not text
        gap = "" if not text.strip() or text.endswith(("\n\n", "\n\r\n")) else nl
        edits.append((len(text), len(text), ("" if ends else nl) + gap +
                      (new if ends else new[:-len(nl)])))
    changed = apply_edits(text, edits, comments, path, "with the flood-memory table")
    # TOML's tables have no order: the text's is kept by editing it.
    if _toml_digest(_toml_read(changed, path, quiet=True)) != expected:
        raise Refused(f"{path}: setup.py could not make the change without changing "
                      f"something else there")
    return changed, was, others, alone


def _toml_digest(document):
    """A digest of a TOML document (taking mcp_servers out of it): the servers whatever
    their order (a table moved to the end is the same table), all else in the order
    written, which the edits keep. repr writes nan, not equal to itself, alike each time,
    and makes no list of a large table's items, as json.dumps would."""
    if not isinstance(document, dict):
        return None
    servers = document.pop("mcp_servers", None)
    servers = sorted(servers.items()) if isinstance(servers, dict) else servers
    return hashlib.sha256(f"{document!r}\0{servers!r}".encode()).digest()


def _toml_read(text, path, quiet=False):
    """The document `text` holds; Refused naming the line if it is not valid TOML (None
    if `quiet`)."""
    import tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if quiet:
            return None
        found = re.search(r"^(.*) \(at line (\d+), column (\d+)\)$", str(exc))
        if found:
            raise Refused(f"{path}, line {found[2]}: not valid TOML ({found[1]}, column "
                          f"{found[3]})") from None
        raise Refused(f"{path}: not valid TOML ({exc})") from None
    except ValueError:  # an integer longer than int() reads
        if quiet:
            return None
        raise Refused(f"{path}: an integer of more than {sys.get_int_max_str_digits()} "
                      f"digits, which Codex does not read either") from None


# ----------------------------------------------------------------------------- writing it


def read_target(path, client):
    """The file to write for `path` (itself, or the file it links to: written through, so
    the link stays), what it holds (None if it does not exist), the mode to give it and its
    os.stat as read (None if it does not exist)."""
    # Only the file's own link is followed, so that paths are named as they were given.
    target = path
    for _ in range(40):
        if not os.path.islink(target):
            break
        target = os.path.join(os.path.dirname(target), os.readlink(target))
    else:
        raise Refused(f"{path} is a link in a loop of links")
    if target != path and not os.path.exists(target):
        raise Refused(f"{path} is a link to {target}, which does not exist")
    if os.path.exists(target) and not os.path.isfile(target):
        raise Refused(f"{target} is not a file")
    folder = os.path.dirname(target)
    while folder and not os.path.isdir(folder):
        if os.path.lexists(folder):
            raise Refused(f"{folder} is a file where a folder should be")
        folder = os.path.dirname(folder) if os.path.dirname(folder) != folder else ""
    if not os.path.exists(target):
        return target, None, 0o600, None  # new: private, as such files come to hold tokens
    mode = os.stat(target).st_mode & 0o7777
    # Replacing a file needs only its folder to be writable: a file marked read-only (as a
    # Nix or Home Manager store's are) would be replaced all the same, so it is refused.
    if not mode & 0o222 or not os.access(target, os.W_OK):
        linked = f" (the file {path} links to)" if target != path else ""
        raise Refused(f"{target}{linked} is read-only: add the entry where it is made, or "
                      f"make it writable")
    with open(target, "rb") as f:
        data, st = read_settled(f, target, client)
    return target, data, mode, st


# Seconds an empty file must stay as it is before setup.py takes it for empty: a client that
# saves by emptying its file and then writing it (as Node's fs.writeFile does) shows it
# empty for a moment, and an install then must not take the person's servers for none.
SETTLED = 1.0


def _state(st):
    """What shows that a file changed: which file it is, its size and when it was written."""
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_settled(f, path, client):
    """What the open file `f` holds and its os.stat, once it holds something, or has stayed
    empty and unchanged for SETTLED seconds; Refused if it keeps changing."""
    start = time.monotonic()
    seen = since = None
    while True:
        st = os.fstat(f.fileno())
        f.seek(0)
        data = f.read()
        state, now = _state(os.fstat(f.fileno())), time.monotonic()
        if state == _state(st) and (data or state == seen and now - since >= SETTLED):
            return data, st
        if state != seen:
            seen, since = state, now
        if now - start > 10 * SETTLED:
            raise Refused(f"{path} kept changing for {10 * SETTLED:g} seconds (a running "
                          f"{CLIENTS[client]} saves it): quit {CLIENTS[client]} and run this "
                          f"again")
        time.sleep(SETTLED / 20)


def _read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _set_mode(fd, mode, owner):
    if hasattr(os, "fchmod"):  # Windows has no file modes to keep
        os.fchmod(fd, mode)
    _give(fd, owner)


def _owner(st):
    """Who owns the file of the os.stat `st`, (uid, gid); None where files have no owner to
    keep (Windows)."""
    return (st.st_uid, st.st_gid) if hasattr(os, "fchown") else None


def _give(path, owner):
    """Make `owner` (uid, gid) the owner of `path` (or open file) when this process is not:
    run as root for a person (sudo keeping HOME), setup.py leaves their files theirs."""
    if owner and owner != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):  # only root may give files away
            os.chown(path, *owner)


def _make_folders(folder, mode=None):
    """Make `folder` and the folders missing above it, each owned as the nearest one that
    exists is; `folder` itself with the mode `mode` if one is given (a private folder)."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder) if os.path.dirname(folder) != folder else ""
    owner = _owner(os.stat(folder or os.curdir))
    for made in reversed(missing):
        private = mode is not None and made == missing[0]
        with contextlib.suppress(FileExistsError):
            os.mkdir(made, mode if private else 0o777)
            _give(made, owner)
            if private:
                os.chmod(made, mode)  # whatever the umask


def copies_of(target):
    """The copies kept beside `target`, oldest first, as (number, path): the first is
    FILE.before-flood-memory, then -2, -3 and on."""
    folder, name = os.path.split(target)
    named = re.compile(re.escape(f"{name}.before-{NAME}") + r"(?:-([1-9][0-9]*))?")
    found = (named.fullmatch(entry) for entry in os.listdir(folder or os.curdir))
    return sorted((int(m[1] or 1), os.path.join(folder, m[0])) for m in found if m)


def copy_holding(target, data):
    """The copy of `target` that holds `data`, or None."""
    for _, copy in copies_of(target):
        with contextlib.suppress(OSError):
            if os.path.getsize(copy) == len(data) and _read_or_none(copy) == data:
                return copy
    return None


def keep_copy(target, data, mode, owner):
    """A new copy of `data`, what `target` held, beside it with the mode `mode` and the
    owner `owner`, numbered after the newest: its path."""
    copies = copies_of(target)
    for n in itertools.count(copies[-1][0] + 1 if copies else 1):
        copy = f"{target}.before-{NAME}" + (f"-{n}" if n > 1 else "")
        try:
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                         0o600)
            break
        except FileExistsError:
            continue
    _write_synced(fd, copy, data, mode, owner)
    return copy


def drop_old_copies(target, in_use, every=False):
    """Take out the copies of `target` (`every` one of them, or) but three: the oldest (the
    file as it was before flood-memory first changed it), `in_use` (the copy named as the
    undo, wherever it is) and the newest. (The paths taken out, whether `in_use` was kept in
    place of the second newest.)"""
    copies = [copy for _, copy in copies_of(target)]
    between = in_use in copies[1:-2]
    kept = set() if every else {*copies[:1], *copies[-1 if between else -2:], in_use}
    dropped = [copy for copy in copies if copy not in kept]
    for copy in dropped:
        with contextlib.suppress(OSError):
            os.remove(copy)
    return dropped, between


def _write_synced(fd, path, data, mode, owner):
    """Write `data` to the new file `path`, open as `fd` (closed after), with the mode `mode`
    and the owner `owner`, and sync it; the file is removed if that fails."""
    try:
        with os.fdopen(fd, "wb") as f:
            _set_mode(f.fileno(), mode, owner)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise


def _temporary(target, data, mode, owner):
    """A new file beside `target` holding `data`, synced, with the mode `mode` and the owner
    `owner`: its path."""
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(target),
                                prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    _write_synced(fd, temp, data, mode, owner)
    return temp


def _write_over(target, data, mode, owner):
    """Write `data` over `target` as one rename of a temporary file beside it."""
    temp = _temporary(target, data, mode, owner)
    try:
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def replace_file(target, old, st, new, mode, client, keep=True):
    """Write `new` over `target` (None: remove it), which held `old` (None: there was no
    such file) when it was read, with the os.stat `st`, as one rename: a temporary file
    beside it, synced, with the mode `mode`, renamed over it if it is still as it was read,
    and the folder synced. A copy of `old` is kept beside it (unless not `keep`): one that
    holds the same bytes, else a new one made first, of which nothing stays if nothing was
    written. Files are owned as the file was (a new one as its folder is). Returns the copy
    or None."""
    folder = os.path.dirname(target)
    _make_folders(folder)
    owner = _owner(os.stat(folder) if st is None else st)
    copy = None if old is None or not keep else copy_holding(target, old)
    made = copy is None and old is not None and keep
    if made:
        copy = keep_copy(target, old, mode, owner)
    changed = Refused(f"{target} changed while setup.py was changing it (a running "
                      f"{CLIENTS[client]} saves it): quit {CLIENTS[client]} and run this "
                      f"again")
    temp = None
    try:
        if new is not None:
            temp = _temporary(target, new, mode, owner)
        # The file renamed over, held open to see whether a save went into it meanwhile.
        with contextlib.ExitStack() as stack:
            held = None
            if old is not None:
                try:
                    held = stack.enter_context(open(target, "rb"))
                except FileNotFoundError:
                    raise changed from None
                if _state(os.fstat(held.fileno())) != _state(st):
                    raise changed
            # Read by its path: a save that renamed another file over it leaves `held` as it
            # was.
            if _read_or_none(target) != old:
                raise changed
            if os.name == "nt" and held:  # Windows renames over no file held open
                held.close()
            if new is None:
                os.remove(target)
            else:
                os.replace(temp, target)
            temp = None
            if held and not held.closed and _state(os.fstat(held.fileno())) != _state(st):
                # A client began to save in the moment between the check and the rename:
                # its save went into the file renamed over, and is put back, unless it has
                # saved again since, over ours.
                saved, _ = read_settled(held, target, client)
                if _read_or_none(target) == new:
                    _write_over(target, saved, mode, owner)
                raise changed
    except BaseException:
        for leftover in (temp, copy if made else None):
            if leftover:
                with contextlib.suppress(OSError):
                    os.remove(leftover)
        raise
    if os.name != "nt":  # Windows cannot open a folder to sync it
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return copy


def _holds_nothing(data):
    """Whether a client's file holding `data` holds nothing: empty, or an empty object."""
    return data.strip() in (b"", b"{}")


def made_by_install(target, change):
    """Whether `target` is a file that --install made: each of its copies (none if it was
    not changed since) holds a flood-memory and nothing else, `change` (install's) taking
    it out. A file the person had is the first copy, without one."""
    for _, copy in copies_of(target):
        try:
            data = _read_or_none(copy) or b""
            if NAME.encode() not in data:  # the person's file, told without parsing it
                return False
            text, bom = decode(data, copy)
            rest, was, _, _ = change(text, None, bare=True)
        except (OSError, Refused):
            return False
        if was is None or not _holds_nothing(_encode(bom, rest)):
            return False
    return True


def remove_empty_folders(folder, home):
    """Remove `folder` if it is empty and inside `home`, and then the folders above it
    inside `home` that are empty (never `home` itself, nor a folder outside it): the ones
    removed."""
    home, removed = os.path.normcase(os.path.abspath(home)), []
    while True:
        if not os.path.normcase(os.path.abspath(folder)).startswith(os.path.join(home, "")):
            return removed
        try:
            os.rmdir(folder)
        except OSError:  # not empty
            return removed
        removed.append(folder)
        folder = os.path.dirname(folder)


# ----------------------------------------------------------------------------- into the client


# What each client needs once the server is in its configuration.
AFTER_INSTALL = {
    "claude-desktop": "Quit Claude Desktop (from its menu: closing the window leaves it "
                      "running) and open it again; it reads the file when it starts.",
    "claude-code": "`claude mcp list` shows flood-memory Connected; a claude session "
                   "already running sees it once started again.",
    "codex": "A new Codex session starts it: `codex mcp list` shows it, and /mcp in the "
             "session its tools.",
    "gemini": "Gemini CLI starts it only in a folder you trust (it asks the first time you "
              "run gemini in one): there `gemini mcp list` shows flood-memory Connected.",
    "copilot": "A new copilot session starts it: /mcp there shows whether it started.",
    "vscode": "VS Code asks whether you trust the server the first time it starts it; MCP: "
              "List Servers shows it.",
    "cursor": "Restart Cursor; its settings then list flood-memory under MCP, to switch on "
              "if it is off.",
    "windsurf": "Restart Windsurf, or press Refresh in Cascade's MCP settings; flood-memory "
                "is then listed there with its five tools.",
}

# Seconds a client's own command (claude mcp add) may take before it is stopped.
CLIENT_COMMAND_TIMEOUT = 60


def starts_server(entry, server):
    """Whether a client's entry for a server starts `server` (this checkout's server.py)."""
    args = entry.get("args") if isinstance(entry, dict) else None
    return isinstance(args, list) and any(isinstance(arg, str) and is_server(arg, server)
                                          for arg in args)


def is_server(arg, server):
    """Whether `arg`, one of the args of a client's entry for a server, names `server`."""
    return (os.path.normcase(os.path.normpath(arg)) == os.path.normcase(server) or
            (os.path.isfile(arg) and os.path.isfile(server) and os.path.samefile(arg, server)))


def own_settings(client, system, environ):
    """The file where `client` (Claude Code, Gemini CLI) keeps the servers of its user
    scope, which setup.py only reads."""
    paths = ntpath if system == "Windows" else posixpath
    if client == "claude-code" and environ.get("CLAUDE_CONFIG_DIR"):
        return paths.join(environ["CLAUDE_CONFIG_DIR"], ".claude.json")
    if client == "gemini" and environ.get("GEMINI_CLI_HOME"):
        return paths.join(environ["GEMINI_CLI_HOME"], ".gemini", "settings.json")
    return client_file(client, system, environ)


def _servers_read_only(client, path, server):
    """What `client` keeps in its own file at `path`, read only: (its flood-memory or None,
    the other servers that start `server`); (None, []) when the file cannot be read (the
    client's command then says why)."""
    try:
        with open(path, "rb") as f:
            text, _ = decode(f.read(), path)
        servers = JsonText(text, path, client in COMMENTED, "mcpServers", server).servers
    except (OSError, Refused):
        return None, []
    return (servers.value, servers.starting) if isinstance(servers, JsonObject) else (None, [])


def run_client(exe, args, environ, timeout=None):
    """Run a client's own command, `exe` with `args`, in the environment `environ`, with no
    input and a time limit: (its exit status, None if it did not start or finish in time;
    what it printed)."""
    command = [exe, *args]
    if os.name == "nt" and exe.lower().endswith((".cmd", ".bat")):
        # npm's wrappers are batch files, which cmd.exe runs reading the whole command line
        # as its own: quoted for it, after /s /c.
        command = (f'"{environ.get("COMSPEC", "cmd.exe")}" /d /s /c '
                   f'"{Cmd.run(command)}"')
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(environ))
        except OSError as exc:
            return None, f"it did not start ({exc.strerror or exc})"
        try:
            code = proc.wait(timeout or CLIENT_COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            if os.name == "nt":  # the batch file's node too
                subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)],
                               capture_output=True)
            proc.kill()
            proc.wait()
            code = None
        out.seek(0)
        said = out.read().decode("utf-8", "replace")
    if code is None:
        said = (f"it did not finish within {timeout or CLIENT_COMMAND_TIMEOUT} seconds and "
                f"was stopped. " + said)
    return code, said


def _said(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in lines[-8:]) or "    (nothing)"


def install_file(client, system, environ, config_files):
    """The file --install merges into for `client`: for Claude Desktop the one it reads
    first (`config_files`, from desktop_config_files)."""
    return config_files[0] if client == "claude-desktop" else client_file(client, system,
                                                                          environ)


def install(client, system, environ, python, data_dir, config_files, remove=False,
            which=shutil.which, here=HERE):
    """Register the server in `client` (--install), or take it out (`remove`, --uninstall):
    through the client's own command for Claude Code and Gemini CLI, else in its file.
    Prints what it did and what the client needs besides; 0 when the server is there (or
    gone) as asked, 1 when nothing could be changed, with what to do instead."""
    server = (ntpath if system == "Windows" else posixpath).join(here, "server.py")
    if client in OWN_COMMAND:
        return _install_by_command(client, system, environ, python, server, data_dir, remove,
                                   which)
    title, shell = CLIENTS[client], shell_for(system)
    path = install_file(client, system, environ, config_files)
    entry = by_hand = None
    if not remove and client == "codex":
        entry = by_hand = codex_table(python, server, data_dir)
    elif not remove:
        document = client_config(client, python, server, data_dir)
        entry, by_hand = document[SERVERS_KEY[client]][NAME], json.dumps(document, indent=2)
    try:
        target, old, mode, st = read_target(path, client)
        text, bom = decode(old, path) if old else ("", b"")

        def change(text, entry, bare=False):
            if client == "codex":
                return toml_changed(text, path, entry, server, bare)
            return json_changed(client, text, path, entry, server, bare)

        changed, was, others, alone = change(text, entry)
        also = "".join(f"\n  ({name} there starts this server.py too; setup.py leaves it as "
                       f"it is.)" for name in others)
        if changed == text:
            if remove:
                print(f"{title}: {path} has no {NAME}: nothing changed.{also}")
            else:
                print(f"{title}: {path} already has {NAME} as setup.py would write it: "
                      f"nothing changed.{also}")
            return 0
        if not remove and was is None and others:
            print(f"{title}: {path} already has {others[0]}, which starts this server.py "
                  f"({server}): no second entry was added. Remove {others[0]} there and run "
                  f"this again to have {NAME} instead.")
            return 0
        text = None  # a large file is not held as text twice over
        try:
            new = _encode(bom, changed)
        except UnicodeEncodeError:
            raise Refused(f"a path holds characters that UTF-8 cannot write ({server}, "
                          f"{data_dir})") from None
        changed = None
        # Given back as a copy holds it: that copy is the undo, and no other is made.
        back = copy_holding(target, new) if remove else None
        if remove and alone and not back:
            # flood-memory was the only server: without the servers too the file may be as
            # it was before --install (a copy holds that), or hold nothing: a file that
            # --install made then goes, with its copies. Where taking the servers out would
            # lose a comment (Refused), they stay, as {}.
            with contextlib.suppress(Refused):
                bare = _encode(bom, change(decode(old, path)[0], None, bare=True)[0])
                if _holds_nothing(bare) and target == path and made_by_install(target, change):
                    new = None
                elif back := copy_holding(target, bare):
                    new = bare
        copy = replace_file(target, old, st, new, mode, client,
                            keep=not back and new is not None)
        # Only once it was written: a run refused leaves every copy as it was.
        dropped, between = [], False
        if old is not None:  # a file that went takes its copies along
            dropped, between = drop_old_copies(target, copy or back, every=new is None)
    except Refused as exc:
        print(f"setup.py: {exc}; nothing was changed.", file=sys.stderr)
        if by_hand:
            print(f"To add {NAME} by hand, merge this into {path}:\n{by_hand}", file=sys.stderr)
        elif remove:
            print(f"To take {NAME} out by hand, edit {path}.", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"setup.py: cannot change {path}: {exc.strerror or exc}; nothing was changed.",
              file=sys.stderr)
        return 1
    linked = f" (through the link to {target})" if target != path else ""
    done = "took" if remove else "added"
    where = "out of" if remove else "to"
    again = f"to add it again, run {setup_command(system)} --client {client} --install."
    if new is None:
        folders = remove_empty_folders(os.path.dirname(target), environ.get(
            "USERPROFILE" if system == "Windows" else "HOME") or os.path.expanduser("~"))
        copies = (f", its cop{'ies' if len(dropped) > 1 else 'y'} {', '.join(dropped)} (which "
                  f"setup.py had written too)" if dropped else "")
        print(f"{title}: took {NAME} out of {path} and removed the file, which --install had "
              f"made and which held nothing else{copies}" + "".join(
                  f", and the folder {folder}" for folder in folders) + f"; {again}")
    elif back:
        print(f"{title}: took {NAME} out of {path}{linked}: it is again as it was before, as "
              f"{back} holds it; {again}")
    elif copy is None:
        print(f"{title}: created {path} with {NAME} in it{linked}. There was no such file: to "
              f"undo, delete it or run {setup_command(system)} --client {client} --uninstall.")
    else:
        move = (["Move-Item", "-Force", copy, target] if system == "Windows"
                else ["mv", copy, target])
        print(f"{title}: {done} {NAME} {where} {path}{linked}.")
        if was is not None and not remove:
            print(f"  It replaces the {NAME} that was there: "
                  f"{json.dumps(was, ensure_ascii=False, default=str)}")
        print(f"  The file as it was is kept as {copy}; to undo ({shell.name}):\n"
              f"{shell.run(move)}")
    if dropped and new is not None:
        newest = "the one named above, and the newest" if between else "and the two newest"
        print(f"  Older copies removed (three are kept: the first, the file as it was before "
              f"setup.py first changed it, {newest}): {', '.join(dropped)}")
    if also:
        print(also.lstrip("\n"))
    if not remove:
        print(AFTER_INSTALL[client])
    return 0


def _install_by_command(client, system, environ, python, server, data_dir, remove, which):
    """install() for a client that keeps its configuration itself: its own command, run
    where it is on PATH; nothing written to its files otherwise."""
    cli, title, shell = OWN_COMMAND[client], CLIENTS[client], shell_for(system)
    settings = own_settings(client, system, environ)
    was, others = _servers_read_only(client, settings, server)
    remove_words = [cli, "mcp", "remove", "--scope", "user", NAME]
    if remove:
        if was is None:
            print(f"{title}: {settings} has no {NAME}: nothing changed.")
            return 0
        runs = [remove_words]
    else:
        entry = {"command": python, "args": [server], "env": {"FLOOD_MEMORY_DIR": data_dir}}
        if isinstance(was, dict) and {k: v for k, v in was.items()
                                      if (k, v) != ("type", "stdio")} == entry:
            print(f"{title}: {NAME} is already there as setup.py would add it (in "
                  f"{settings}): nothing changed.")
            return 0
        if was is None and others:
            print(f"{title}: {others[0]} (in {settings}) already starts this server.py "
                  f"({server}): no second entry was added. Remove it (`{cli} mcp remove "
                  f"--scope user {others[0]}`) and run this again to have {NAME} instead.")
            return 0
        # Claude Code refuses to add a name it has; Gemini CLI's add replaces it.
        runs = ([remove_words] if was is not None and client == "claude-code" else []) + [
            add_command(client, python, server, data_dir)]
    exe = which(cli, path=environ.get("PATH"))
    if exe is None:
        print(f"setup.py: {cli} is not on PATH; {title} keeps its configuration itself (in "
              f"{settings}), so setup.py writes nothing there. Where {cli} is on PATH, run "
              f"({shell.name}):\n" + "\n".join(shell.run(words) for words in runs),
              file=sys.stderr)
        return 1
    for n, words in enumerate(runs):
        code, said = run_client(exe, words[1:], environ)
        if code != 0:
            status = "it did not finish" if code is None else f"exit {code}"
            gone = (f" (the {NAME} that was there was taken out first: "
                    f"{json.dumps(was, ensure_ascii=False)})" if n else "")
            print(f"setup.py: this failed ({status}){gone}:\n{shell.run(words)}\n  {cli} "
                  f"said:\n{_said(said)}", file=sys.stderr)
            return 1
        print(f"{title}: ran {shell.run(words)}\n{_said(said)}")
    if was is not None and not remove:
        print(f"  It replaces the {NAME} that was there: {json.dumps(was, ensure_ascii=False)}")
    if not remove:
        print(f"  To undo, run {setup_command(system)} --client {client} --uninstall (it runs "
              f"{shell.run(remove_words)}).")
        print(AFTER_INSTALL[client])
    return 0


# The command of each client, and the folder that shows it is here.
_COMMANDS = {"claude-code": "claude", "codex": "codex", "gemini": "gemini",
             "copilot": "copilot", "vscode": "code", "cursor": "cursor",
             "windsurf": "windsurf"}


def clients_here(system, environ, config_files, which=shutil.which, isdir=os.path.isdir):
    """The clients that look installed here, [(client, what shows it)]: their configuration
    folder exists, or their command is on PATH."""
    paths = ntpath if system == "Windows" else posixpath
    home = (environ.get("USERPROFILE") if system == "Windows" else environ.get("HOME")) or "~"
    folders = {
        "claude-desktop": paths.dirname(config_files[0]),
        "claude-code": paths.join(home, ".claude"),
        "gemini": paths.join(home, ".gemini"),
        "cursor": paths.join(home, ".cursor"),
        "windsurf": paths.join(home, ".codeium", "windsurf"),
    }
    for client in ("codex", "copilot", "vscode"):
        folders[client] = paths.dirname(client_file(client, system, environ))
    found = []
    for client in CLIENTS:
        if isdir(folders[client]):
            found.append((client, folders[client]))
        elif client in _COMMANDS and which(_COMMANDS[client], path=environ.get("PATH")):
            found.append((client, f"{_COMMANDS[client]} is on PATH"))
    return found


def offer(system, environ, python, data_dir, config_files):
    """At a terminal: name the clients found here and ask, for each, whether to add the
    server there. The exit status: 1 if an install that was asked for failed."""
    found = clients_here(system, environ, config_files)
    if not found:
        return 0
    print("Clients found here: " + "; ".join(f"{CLIENTS[c]} ({why})" for c, why in found))
    status = 0
    for client, _ in found:
        try:
            answer = input(f"Add {NAME} to {CLIENTS[client]}? [y/N] ")
        except EOFError:
            print()
            break
        if answer.strip().lower() in ("y", "yes"):
            status = max(status, install(client, system, environ, python, data_dir,
                                         config_files))
    return status


def make_data_directory(data_dir, litestream):
    """Make the data directory and the memory.db in it, as the store opens them, each owned
    as the folder it is made in (run as root for a person, theirs; SQLite run as root gives
    the -wal and -shm it makes to the database's owner itself)."""
    from store import DB_NAME, PRIVATE_DIR, open_directory

    database = os.path.join(data_dir, DB_NAME)
    new = not os.path.lexists(database)
    with contextlib.suppress(OSError):  # open_directory then says why it cannot
        _make_folders(data_dir, PRIVATE_DIR)
    open_directory(data_dir, litestream).close()
    if new:
        _give(database, _owner(os.stat(data_dir)))


# ----------------------------------------------------------------------------- the test run

# The files of a checkout: a test run's verdict holds for their content under one Python, and
# a bundle carries them.
PYTHON_FILES = ("server.py", "server_remote.py", "store.py", "test.py", "setup.py")
RECORD_NAME = "tests-passed.json"
KEPT_RECORDS = 20


def cache_dir(system, environ):
    """This person's folder for what can be made again (the record of passed test runs):
    under %LOCALAPPDATA%, ~/Library/Caches or $XDG_CACHE_HOME (~/.cache)."""
    if system == "Windows":
        profile = environ.get("USERPROFILE") or os.path.expanduser("~")
        return ntpath.join(environ.get("LOCALAPPDATA") or ntpath.join(profile, "AppData",
                                                                      "Local"), NAME)
    home = environ.get("HOME") or os.path.expanduser("~")
    if system == "Darwin":
        return posixpath.join(home, "Library", "Caches", NAME)
    return posixpath.join(environ.get("XDG_CACHE_HOME") or posixpath.join(home, ".cache"), NAME)


def sqlite_version(python):
    """The version of the SQLite library `python` uses, as it says it ("" if it cannot):
    asked of it, or of store.py's sqlite3 for this Python (only store.py imports sqlite3)."""
    if python == sys.executable:  # one Python fewer to start at every run
        import store
        return store.sqlite3.sqlite_version
    try:
        out = subprocess.run([python, "-c", "import sqlite3; print(sqlite3.sqlite_version)"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def checkout_key(folder, python=sys.executable, version=sys.version, sqlite=None):
    """The content of the checkout's PYTHON_FILES in `folder` and the Python that tests them
    with its SQLite library (`sqlite`, its version: asked of `python` if None), as one
    SHA-256: no path or time, so that a fresh clone of the same commit has the key of this
    one. The library is apart from the Python: a system upgrade can change it alone."""
    sqlite = sqlite_version(python) if sqlite is None else sqlite
    digest = hashlib.sha256(f"{python}\0{version}\0{sqlite}\0".encode())
    for name in PYTHON_FILES:
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def read_records(path):
    """The passed runs recorded at `path`, {key: {"passed": epoch seconds, "seconds": n}},
    oldest first; none if the file is missing or damaged (an entry without both numbers)."""
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except (OSError, ValueError):
        return {}
    whole = isinstance(records, dict) and all(
        isinstance(entry, dict) and all(type(entry.get(k)) in (int, float)
                                        for k in ("passed", "seconds"))
        for entry in records.values())
    return records if whole else {}


def record_pass(path, key, passed, seconds):
    """Add a passed run to the records at `path`, keeping the newest KEPT_RECORDS, in a
    folder and a file that only this person can read."""
    from store import PRIVATE_DIR, PRIVATE_FILE

    records = read_records(path)
    records.pop(key, None)
    records[key] = {"passed": passed, "seconds": round(seconds, 1)}
    folder = os.path.dirname(path)
    _make_folders(folder, PRIVATE_DIR)
    data = json.dumps(dict(list(records.items())[-KEPT_RECORDS:]), indent=1).encode()
    _write_over(path, data, PRIVATE_FILE, _owner(os.stat(folder)))


def took(seconds):
    """A duration as a person reads it: "48 s", "1 min 35 s"."""
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def run_tests(system, environ, again=False):
    """The test suite, run unless this checkout passed it with this Python before (`again`:
    run anyway), a pass recorded in the person's cache folder. Whether it passed."""
    record = os.path.join(cache_dir(system, environ), RECORD_NAME)
    sqlite = sqlite_version(sys.executable)
    try:
        key = checkout_key(HERE, sqlite=sqlite)
    except OSError:
        key = None  # a file is missing: the run says which
    files = f"{', '.join(PYTHON_FILES[:-1])} and {PYTHON_FILES[-1]}"
    seen = read_records(record).get(key) if key else None
    if seen and not again:
        with contextlib.suppress(ValueError, OverflowError, OSError):  # a time out of range
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(seen["passed"]))
            print(f"Tests: not run; this checkout's {files}, as they are, passed them with "
                  f"this Python on {when} (in {took(seen['seconds'])}); --tests runs them "
                  f"again.")
            return True
    command = "py" if system == "Windows" else "python3"
    print(f"Running the test suite ({command} test.py)...", flush=True)
    begun = time.monotonic()
    code = subprocess.run([sys.executable, os.path.join(HERE, "test.py")], cwd=HERE).returncode
    seconds = time.monotonic() - begun
    if code != 0:
        print(f"setup.py: the tests failed (after {took(seconds)}); fix that before "
              f"connecting a client.", file=sys.stderr)
        return False
    try:
        if key is None or checkout_key(HERE, sqlite=sqlite) != key:
            print(f"The tests passed in {took(seconds)}; a file changed while they ran, so "
                  f"the next setup.py runs them again.")
            return True
        record_pass(record, key, time.time(), seconds)
    except OSError as exc:
        print(f"The tests passed in {took(seconds)}; they could not be recorded "
              f"({exc.filename or record}: {exc.strerror or exc}), so the next setup.py "
              f"runs them again.")
    else:
        print(f"The tests passed in {took(seconds)}; recorded in {record}: setup.py runs "
              f"them again once {files.replace(' and ', ' or ')} changes, or with --tests.")
    return True


# ----------------------------------------------------------------------------- the bundle

BUNDLE_NAME = "flood-memory.mcpb"

# No dependencies: uv makes an environment with nothing in it and runs server.py there.
PYPROJECT = """\
[project]
name = "flood-memory"
version = "{version}"
description = "Long-term memory for an AI assistant, served over MCP"
requires-python = ">=3.11"
dependencies = []
"""


def bundle_manifest(tools, version, default_dir):
    """manifest.json of the Claude Desktop bundle (MCP Bundle manifest 0.4), for `tools`
    (server.py's TOOLS): Claude Desktop runs server.py with uv and a Python that it provides,
    in the data directory the person chooses, by default `default_dir` under their home."""
    return {
        "manifest_version": "0.4",
        "name": NAME,
        "display_name": "Flood Memory",
        "version": version,
        "description": "Long-term memory for Claude: memories kept in one SQLite file on "
                       "this computer, found again by their words and tags.",
        "author": {"name": "Flood Memory"},
        "server": {
            "type": "uv",
            "entry_point": "server.py",
            "mcp_config": {
                "command": "uv",
                "args": ["run", "--directory", "${__dirname}", "server.py"],
                "env": {"FLOOD_MEMORY_DIR": "${user_config.data_dir}"},
            },
        },
        "tools": [{"name": name, "description": tool["description"]}
                  for name, tool in tools.items()],
        "user_config": {
            "data_dir": {
                "type": "directory",
                "title": "Data directory",
                "description": "The folder that keeps your memories (memory.db); the "
                               "default is the one setup.py uses.",
                "default": "${HOME}" + default_dir.removeprefix("~"),
            },
        },
        "compatibility": {"platforms": ["darwin", "win32", "linux"],
                          "runtimes": {"python": ">=3.11"}},
    }


def write_bundle(target):
    """Write the Claude Desktop bundle to `target`: a zip of manifest.json, pyproject.toml
    and PYTHON_FILES, whose bytes depend on their content alone. 0, or 1 saying why not."""
    from server import SERVER_INFO, TOOLS
    from store import DEFAULT_DIR

    version = SERVER_INFO["version"]
    manifest = bundle_manifest(TOOLS, version, DEFAULT_DIR)
    path = os.path.abspath(os.path.expanduser(target))
    if os.path.isdir(path):
        print(f"setup.py: {target} is a directory; give the bundle a file name, such as "
              f"{os.path.join(target, BUNDLE_NAME)}", file=sys.stderr)
        return 1
    temporary = path + ".part"
    try:
        members = [("manifest.json", json.dumps(manifest, indent=2) + "\n"),
                   ("pyproject.toml", PYPROJECT.format(version=version))]
        for name in PYTHON_FILES:
            with open(os.path.join(HERE, name), "rb") as f:
                members.append((name, f.read()))
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name, data in members:
                member = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                member.create_system, member.external_attr = 3, 0o644 << 16  # rw-r--r--
                bundle.writestr(member, data, zipfile.ZIP_DEFLATED)
        _give(temporary, _owner(os.stat(os.path.dirname(path))))
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        print(f"setup.py: cannot write {exc.filename or path}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print(f"Wrote {path} ({os.path.getsize(path) // 1024} KB), a Claude Desktop extension: "
          f"open it (double-click it, or drag it onto Claude Desktop's Settings > "
          f"Extensions) and choose Install. Its data directory is {DEFAULT_DIR} unless you "
          f"choose another there.")
    return 0


# ----------------------------------------------------------------------------- main


def main(argv=None):
    # What a client's file held (an escaped lone surrogate) or a path the console's code
    # page lacks is printed escaped: a traceback after the file is written would hide the
    # undo line.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")
    parser = argparse.ArgumentParser(description="Set up Flood Memory on this machine.")
    tests = parser.add_mutually_exclusive_group()
    tests.add_argument("--no-tests", action="store_true", help="skip the test run")
    tests.add_argument("--tests", action="store_true",
                       help="run the tests even if this checkout passed them before")
    parser.add_argument("--client", choices=CLIENTS, metavar="NAME",
                        help="print what registers the server in this client only: "
                             + ", ".join(CLIENTS))
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--install", action="store_true",
                        help="with --client: register the server in that client (its own "
                             "command for claude-code and gemini; else merged into its file, "
                             "a copy of the file kept beside it)")
    action.add_argument("--uninstall", action="store_true",
                        help="with --client: take flood-memory out of that client again")
    action.add_argument("--bundle", nargs="?", const=BUNDLE_NAME, metavar="FILE",
                        help=f"write a Claude Desktop extension, to install by opening it, to "
                             f"FILE (default {BUNDLE_NAME}); nothing else is done")
    args = parser.parse_args(argv)
    if args.bundle is not None and args.client:
        parser.print_usage(sys.stderr)
        print("setup.py: --bundle makes the bundle alone; leave out --client", file=sys.stderr)
        return 2
    if (args.install or args.uninstall) and not args.client:
        parser.print_usage(sys.stderr)
        print(f"setup.py: --{'install' if args.install else 'uninstall'} needs --client NAME, "
              f"with NAME one of {', '.join(CLIENTS)}", file=sys.stderr)
        return 2
    if sys.version_info < MIN_PYTHON:
        print(f"setup.py: Flood Memory needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; "
              f"this is {platform.python_version()}", file=sys.stderr)
        return 1
    try:
        return _main(args)
    except KeyboardInterrupt:
        print("\nsetup.py: stopped (Ctrl+C).", file=sys.stderr)
        return 130


def _main(args):
    sys.path.insert(0, HERE)
    from server import risky_location
    from store import StoreError, data_settings

    system, environ = platform.system(), os.environ
    if args.bundle is not None:
        return write_bundle(args.bundle)
    if args.uninstall:
        # Taking the entry out needs no server, no interpreter and no data directory.
        return install(args.client, system, environ, None, None,
                       desktop_config_files(system, environ, glob.glob), remove=True)
    home = os.path.expanduser("~")
    try:
        data_dir, litestream = data_settings(environ)
        make_data_directory(data_dir, litestream)
    except StoreError as exc:
        print(f"setup.py: {exc}", file=sys.stderr)
        return 1
    print(f"Data directory: {data_dir} (memory.db is ready, "
          f"{privacy_note(system, data_dir, home)})")
    warnings = privacy_warnings(system, home, HERE, data_dir)
    risk = risky_location(data_dir, system)
    for warning in [*warnings, *([risk[0].upper() + risk[1:]] if risk else [])]:
        print(f"Warning: {warning}")

    if not args.no_tests and not run_tests(system, environ, args.tests):
        return 1

    env = bare_environment(system, environ)
    python, reasons = interpreter(system, env, candidates(system, sys.executable, shutil.which,
                                                          ask_launcher))
    if python is None:
        print("setup.py: found no Python 3.11+ with SQLite full-text search that a client "
              "could start:\n  " + "\n  ".join(reasons), file=sys.stderr)
        return 1
    for reason in reasons:
        print(f"Not using {reason}")
    for warning in privacy_warnings(system, home, python=python):
        print(f"Warning: {warning}")
    problem = check_start(python, data_dir, env)
    if problem is not None:
        print(f"setup.py: the server does not start as a client would start it "
              f"({python} {os.path.join(HERE, 'server.py')}, with "
              f"{describe_environment(env)}): {problem}", file=sys.stderr)
        return 1
    print(f"Checked: {python} starts the server with a desktop app's bare environment "
          f"({describe_environment(env)}), and it answers initialize and tools/list, and "
          f"MCP 2026-07-28's server/discover and a tools/call.")
    config_files = desktop_config_files(system, environ, glob.glob)
    if args.install:
        return install(args.client, system, environ, python, data_dir, config_files)
    if args.client:
        print(client_instructions(args.client, system, python, data_dir, environ, config_files))
        return 0
    print(instructions(system, python, data_dir, config_files, secrets.token_urlsafe(32)))
    # Asked only of a person at a terminal: a script, a pipe or an editor's task gets
    # the output above and nothing else.
    if sys.stdin and sys.stdout and sys.stdin.isatty() and sys.stdout.isatty():
        return offer(system, environ, python, data_dir, config_files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
