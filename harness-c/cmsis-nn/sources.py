#!/usr/bin/env python3
"""List the C sources a CMSIS-NN checkout's own CMake build compiles.

    sources.py CMSIS_NN_DIR [NAME=ON ...]

Prints one path per line, relative to CMSIS_NN_DIR/Source, sorted. It reads
Source/CMakeLists.txt and the Source/*/CMakeLists.txt it adds, and follows the
small part of CMake they use: option(), set(), list(APPEND), file(GLOB),
if()/elseif()/else()/endif() on variable names joined by OR / AND / NOT,
add_subdirectory() and target_sources(). A variable that is never set is OFF,
as in CMake, so opt-in switches such as ARM_NN_ENABLE_F16 / ARM_NN_ENABLE_F32
(CMSIS-NN's experimental float kernels) stay off unless given as NAME=ON.

A checkout without Source/CMakeLists.txt (a copy of the sources only) gets
every .c under Source/, and a note on stderr.
"""
import fnmatch
import os
import re
import sys

TRUE = {"1", "ON", "YES", "TRUE", "Y"}


def tokens(args):
    """Split a command's argument text: quoted strings stay whole."""
    return [a[1:-1] if a.startswith('"') else a for a in re.findall(r'"[^"]*"|[^\s"]+', args)]


def commands(text):
    """(name, argument text) of each command, comments removed."""
    text = re.sub(r"#[^\n]*", "", text)
    return [(m.group(1).lower(), m.group(2)) for m in re.finditer(r"([A-Za-z_]\w*)\s*\(([^()]*)\)", text)]


class Build:
    def __init__(self, root, defines):
        self.root = root
        self.vars = dict(defines)
        self.sources = set()

    def expand(self, word):
        out = re.sub(r"\$\{(\w+)\}", lambda m: self.vars.get(m.group(1), ""), word)
        return out.split(";") if ";" in out else [out]

    def words(self, args):
        return [w for t in tokens(args) for w in self.expand(t) if w != ""]

    def truth(self, args):
        # Variable names joined by OR / AND / NOT, left to right, AND first.
        words = tokens(args)
        ors, cur = [], []
        for w in words:
            if w.upper() == "OR":
                ors.append(cur)
                cur = []
            else:
                cur.append(w)
        ors.append(cur)

        def one(group):
            value, negate = True, False
            for w in group:
                u = w.upper()
                if u == "AND":
                    continue
                if u == "NOT":
                    negate = not negate
                    continue
                v = self.vars.get(w, w if u in TRUE else "OFF").upper() in TRUE
                value = value and (v != negate)
                negate = False
            return value

        return any(one(g) for g in ors if g)

    def run(self, directory):
        path = os.path.join(directory, "CMakeLists.txt")
        with open(path, encoding="utf-8") as f:
            cmds = commands(f.read())
        # Stack of (this branch taken, some branch of this if taken, parent active).
        stack = []
        active = True
        for name, args in cmds:
            if name == "if":
                taken = active and self.truth(args)
                stack.append((active, taken))
                active = taken
                continue
            if name in ("elseif", "else"):
                parent, done = stack[-1]
                taken = parent and not done and (name == "else" or self.truth(args))
                stack[-1] = (parent, done or taken)
                active = taken
                continue
            if name == "endif":
                active = stack.pop()[0]
                continue
            if not active:
                continue
            w = self.words(args)
            if name == "option" and w:
                self.vars.setdefault(w[0], w[-1] if len(w) > 2 else "OFF")
            elif name == "set" and w:
                self.vars[w[0]] = ";".join(w[1:])
            elif name == "list" and len(w) >= 2 and w[0].upper() == "APPEND":
                old = [x for x in self.vars.get(w[1], "").split(";") if x]
                self.vars[w[1]] = ";".join(old + w[2:])
            elif name == "file" and len(w) >= 2 and w[0].upper() in ("GLOB", "GLOB_RECURSE"):
                found = []
                for pattern in w[2:]:
                    pdir, pname = os.path.split(os.path.normpath(os.path.join(directory, pattern)))
                    if os.path.isdir(pdir):
                        found += [os.path.join(pdir, n) for n in os.listdir(pdir)
                                  if fnmatch.fnmatchcase(n, pname)]
                self.vars[w[1]] = ";".join(sorted(found))
            elif name == "add_subdirectory" and w:
                self.run(os.path.join(directory, w[0]))
            elif name == "target_sources" and w:
                for s in w[1:]:
                    if s.upper() in ("PRIVATE", "PUBLIC", "INTERFACE"):
                        continue
                    p = os.path.normpath(os.path.join(directory, s))
                    if p.endswith(".c"):
                        self.sources.add(os.path.relpath(p, self.root))


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: sources.py CMSIS_NN_DIR [NAME=ON ...]")
    source = os.path.abspath(os.path.join(sys.argv[1], "Source"))
    defines = dict(a.split("=", 1) for a in sys.argv[2:])
    if not os.path.isfile(os.path.join(source, "CMakeLists.txt")):
        print(f"memtrace: {source} has no CMakeLists.txt: compiling every .c under it", file=sys.stderr)
        for d, _, files in os.walk(source):
            for n in files:
                if n.endswith(".c"):
                    print(os.path.relpath(os.path.join(d, n), source))
        return
    b = Build(source, defines)
    b.run(source)
    for s in sorted(b.sources):
        print(s)


main()
