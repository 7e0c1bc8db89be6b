"""Set up Flood Memory on this machine: data directory, test run, client configuration.

    python3 setup.py             # all three (on Windows: py setup.py)
    python3 setup.py --no-tests  # skip the test run
    python3 setup.py --client codex  # only what registers it in one client (see --help)

It changes nothing outside the data directory: the client configuration is printed, for
you to paste where it says, with commands in the shell of this system (PowerShell on
Windows). Before printing it, it starts the server exactly as a client will (the same
command, in the bare environment a desktop app gives its servers) and checks that the
server answers.

What differs between macOS, Windows and Linux is decided by small functions that take the
system (platform.system()) and its environment as arguments, so that the tests can play
each system on any other.
"""

import argparse
import glob
import json
import ntpath
import os
import platform
import posixpath
import secrets
import shutil
import subprocess
import sys

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
    directory, and ask for initialize and tools/list; None if it answered both, else what
    went wrong."""
    env = dict(env, FLOOD_MEMORY_DIR=data_dir)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "setup.py", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    try:
        # Started from the file system's root: a client's working directory is its own.
        done = subprocess.run([python, os.path.join(HERE, "server.py")], input=stdin,
                              capture_output=True, text=True, timeout=30, env=env,
                              cwd=os.path.abspath(os.sep))
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


# ----------------------------------------------------------------------------- main


def run_tests(system):
    print(f"Running the test suite ({'py' if system == 'Windows' else 'python3'} test.py)...",
          flush=True)
    return subprocess.run([sys.executable, os.path.join(HERE, "test.py")], cwd=HERE).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(description="Set up Flood Memory on this machine.")
    parser.add_argument("--no-tests", action="store_true", help="skip the test run")
    parser.add_argument("--client", choices=CLIENTS, metavar="NAME",
                        help="print what registers the server in this client only: "
                             + ", ".join(CLIENTS))
    args = parser.parse_args(argv)
    if sys.version_info < MIN_PYTHON:
        print(f"setup.py: Flood Memory needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; "
              f"this is {platform.python_version()}", file=sys.stderr)
        return 1

    sys.path.insert(0, HERE)
    from server import risky_location
    from store import DEFAULT_DIR, StoreError, open_directory

    system, environ = platform.system(), os.environ
    home = os.path.expanduser("~")
    data_dir = os.path.expanduser(environ.get("FLOOD_MEMORY_DIR") or DEFAULT_DIR)
    if data_dir.startswith("~"):
        print(f"setup.py: cannot expand ~ in {data_dir} (no HOME or USERPROFILE); set "
              f"FLOOD_MEMORY_DIR to an absolute path", file=sys.stderr)
        return 1
    # Absolute: a client starts the server in a directory of its own, and may not give it
    # what ~ needs.
    data_dir = os.path.abspath(data_dir)
    try:
        open_directory(data_dir).close()
    except StoreError as exc:
        print(f"setup.py: {exc}", file=sys.stderr)
        return 1
    print(f"Data directory: {data_dir} (memory.db is ready, "
          f"{privacy_note(system, data_dir, home)})")
    warnings = privacy_warnings(system, home, HERE, data_dir)
    risk = risky_location(data_dir, system)
    for warning in [*warnings, *([risk[0].upper() + risk[1:]] if risk else [])]:
        print(f"Warning: {warning}")

    if not args.no_tests and run_tests(system) != 0:
        print("setup.py: the tests failed; fix that before connecting a client.", file=sys.stderr)
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
          f"({describe_environment(env)}), and it answers initialize and tools/list.")
    config_files = desktop_config_files(system, environ, glob.glob)
    if args.client:
        print(client_instructions(args.client, system, python, data_dir, environ, config_files))
    else:
        print(instructions(system, python, data_dir, config_files, secrets.token_urlsafe(32)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
