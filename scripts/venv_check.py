"""Says whether this Python environment is exactly a lock file of scripts/requirements/.

usage: venv_check.py LOCK [--allow OTHER_LOCK]... [--print]

Every `name==version` line of LOCK (and of the files it includes with -r) must be
installed at that version. Any other installed package is an extra, allowed only when an
--allow lock pins it at its installed version (the benchmark peers stay in a --test
setup). pip, setuptools and wheel are the installer's own and not checked. Exits 0 when
the environment matches, 1 with one line per difference otherwise; --print also lists
the versions in use.
"""
import argparse
import importlib.metadata
import os
import re
import sys

INSTALLER = {"pip", "setuptools", "wheel"}


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    pins = {}
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("-r "):
                pins.update(read_lock(os.path.join(os.path.dirname(path), line[3:].strip())))
                continue
            name, sep, version = line.partition("==")
            if not sep or not version:
                sys.exit(f"{path}:{number}: '{line}' is not name==version (every package is pinned exactly)")
            pins[normalize(name)] = version.strip()
    return pins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lock")
    ap.add_argument("--allow", action="append", default=[])
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args()
    want = read_lock(a.lock)
    allowed = {}
    for other in a.allow:
        allowed.update(read_lock(other))
    have = {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    problems = []
    for name, version in sorted(want.items()):
        if name not in have:
            problems.append(f"{name}: missing (pinned {version})")
        elif have[name] != version:
            problems.append(f"{name}: {have[name]} installed, pinned {version}")
    for name, version in sorted(have.items()):
        if name in want or name in INSTALLER:
            continue
        if allowed.get(name) != version:
            problems.append(f"{name}: {version} installed, pinned nowhere")
    if a.print:
        shown = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "deepspeed", "torchao")
        print("python " + sys.version.split()[0] + ", " +
              ", ".join(f"{n} {have[n]}" for n in shown if n in have))
    for p in problems:
        print(f"venv_check: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
