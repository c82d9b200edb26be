"""Every ``wiscat`` command imports the whole parser; the libraries only a few commands use are
imported by those commands, so that an operator's ``wiscat link list`` (and each of the e2e
tests' hundreds of commands) does not pay for an HTTP client, a web server and a JSON schema
validator it never uses: about 0.4 s of CPU of 1.2 a command."""

import subprocess
import sys

# what `import wiscat.cli` must not load, and the command that does load each
LATE = {
    "aiohttp": "registry sync, registry announce-self (and the services)",
    "uvicorn": "provider, harvester, run",
    "fastapi": "provider, run",
    "jsonschema": "wis2 render (a schema check)",
    "wiscat.shared.registry_node": "registry sync",
    "wiscat.shared.wcmp2.convert": "wis2 render (with its vocabularies and URI grammar)",
    "wiscat.shared.db.wis2": "wis2 status, wis2 republish",
}


def test_the_command_line_starts_without_the_libraries_few_commands_use() -> None:
    names = ", ".join(repr(name) for name in LATE)
    probe = f"import sys, wiscat.cli; print([n for n in ({names}) if n in sys.modules])"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]", f"imported by every command: {loaded}; see {LATE}"
