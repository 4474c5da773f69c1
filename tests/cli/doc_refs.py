"""doc_refs.py cites HETRING SRC TESTS: what README.md, DESIGN.md, bench/README.md and
python/README.md cite against what the build has, one "FILE:LINE: ..." line per citation that
names nothing (exit 1 when there is one):

  keys   every [section] key, --set section.key=... and HETRING_SECTION_KEY is a key of
         `hetring config --reference` (the schema);
  flags  every --flag (and -b/-e/-f) written after `hetring CMD` or `hetring bench SUITE` in a
         code span or code line is in that command's --help;
  tests  every test a `ctest -R NAME` or a `label.name` span cites is in TESTS (one name a
         line, `ctest -N`'s), or for cuda.* in tests/cuda/CMakeLists.txt (a CUDA build's);
  files  every path like dir/file.ext is a file of SRC (or of the citing file's folder);
  python every keyword passed to Trainer(...) or Node(...) is one of its parameters, and every
         ht.NAME and hetring.NAME a name of hetring.torch or hetring (read with ast);
  c      every hetring_NAME is declared in cluster/hetring.h or cluster/hetring_app.h.

doc_refs.py records README METRICS SUMMARY [BENCH_JSON]: the keys README.md's tables give the
metrics records (iteration, view, end), the summary and bench allreduce --json are the keys a
run wrote, both ways (a key written and not documented, or documented and never written).
"""
import os
import re
import subprocess
import sys

DOCS = ["README.md", "DESIGN.md", "bench/README.md", "python/README.md"]


def spans(text):
    """(offset, text) of every code line (indented, or inside ``` fences) and every backtick
    span of the prose (a span may run over a line break, which becomes a space)."""
    out, prose, fence, off = [], [], False, 0
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            prose.append(" " * len(line))  # blanked, so that offsets stay the text's
        elif fence or line.startswith("    "):
            out.append((off, line))
            prose.append(" " * len(line))
        else:
            prose.append(line)
        off += len(line) + 1
    prose_text = "\n".join(prose)
    out += [(m.start(), m.group(1).replace("\n", " "))
            for m in re.finditer(r"`([^`]+)`", prose_text)]
    return out


def schema_keys(hr):
    """{(section, key)} of hetring config --reference; node sections as "node"."""
    ref = subprocess.run([hr, "config", "--reference"], capture_output=True, text=True,
                         check=True).stdout
    keys, section = set(), None
    for line in ref.splitlines():
        m = re.match(r"\[([a-z]+)", line)
        if m:
            section = m.group(1)
        m = re.match(r";?([a-z_]+) =", line)
        if m and section:
            keys.add((section, m.group(1)))
    return keys


def check_keys(where, text, keys):
    bad = []
    cites = [(m.start(), m.group(1), m.group(2))
             for m in re.finditer(r"\[(cluster|train|controller|node)(?:\.[A-Za-z0-9]+)?\] "
                                  r"([a-z_]+)", text)]
    cites += [(m.start(), m.group(1), m.group(2))
              for m in re.finditer(r"--set (cluster|train|controller|node)\.(?:[0-9A-Z]+\.)?"
                                   r"([a-z_]+)", text)]
    cites += [(m.start(), m.group(1).lower(), m.group(2).lower())
              for m in re.finditer(r"HETRING_(CLUSTER|TRAIN|CONTROLLER)_([A-Z][A-Z_]*[A-Z])",
                                   text)]
    for off, section, key in cites:
        if (section, key) not in keys:
            bad.append(f"{where(off)}: [{section}] {key} is no key of hetring config "
                       f"--reference")
    return bad, len(cites)


def listed(hr, args, heading):
    """The first words of the indented lines after heading in hetring ARGS --help."""
    out = subprocess.run([hr] + args + ["--help"], capture_output=True, text=True).stdout
    return re.findall(r"(?m)^  ([a-z][a-z-]*) ", out.split(heading, 1)[1]) if heading in out \
        else []


def check_flags(where, text, hr):
    """Every --flag after hetring CMD (the commands of hetring --help, the suites of hetring
    bench --help) in a code line or span is in that command's --help."""
    commands = [c for c in listed(hr, [], "Commands:") if c not in ("bench", "help")]
    suites = listed(hr, ["bench"], "Suites:")
    helps, bad, n = {}, [], 0
    for off, s in spans(text):
        for m in re.finditer(r"\bhetring (bench )?([a-z-]+)((?: [^|;&\n]*)?)", s):
            cmd = ("bench " if m.group(1) else "") + m.group(2)
            if cmd not in commands and cmd not in ["bench " + x for x in suites]:
                continue
            if cmd not in helps:
                helps[cmd] = subprocess.run([hr] + cmd.split() + ["--help"],
                                            capture_output=True, text=True).stdout
            rest = m.group(3).split(" -- ")[0]  # after --: options of hetring run
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[bef])\b", rest):
                n += 1
                if not re.search(r"(?<![\w-])" + re.escape(flag) + r"\b", helps[cmd]):
                    bad.append(f"{where(off)}: hetring {cmd} {flag}: not in hetring {cmd} "
                               f"--help")
    return bad, n


def check_tests(where, text, tests, src):
    cuda = open(os.path.join(src, "tests/cuda/CMakeLists.txt")).read()
    labels = r"(?:api|app|bench|cli|conf|ctrl|cuda|dist|examples|fuzz|gpu|layers|python|ring|" \
             r"trainer)"
    cites = [(m.start(), m.group(1)) for m in re.finditer(r"ctest -R ([a-z_.0-9]+)", text)]
    for off, s in spans(text):
        for m in re.finditer(r"^" + labels + r"\.[a-z_0-9{},*]+(?:\.[a-z_0-9{},*]+)*$",
                             s.strip()):
            # dist.nccl.{kill,late} is two names; ring.correct.* a group, cited by its prefix
            b = re.match(r"([^{]*)\{([^}]*)\}(.*)$", m.group(0))
            names = [b.group(1) + x + b.group(3) for x in b.group(2).split(",")] if b \
                else [m.group(0)]
            cites += [(off, n.replace(".*", "")) for n in names]
    bad = []
    for off, name in cites:
        if any(t == name or t.startswith(name + ".") or (name.endswith("_") and
               t.startswith(name)) for t in tests):
            continue
        if name == "cuda" or name.startswith("cuda.") and (
                f"NAME {name} " in cuda or re.search(r"\b" + name[5:] + r"\b", cuda)):
            continue
        # -R takes a regular expression: a prefix of a name is a citation of its group
        if any(t.startswith(name) for t in tests):
            continue
        bad.append(f"{where(off)}: test {name}: no such ctest")
    return bad, len(cites)


def check_files(where, text, src, doc):
    bad, n = [], 0
    for m in re.finditer(r"(?<![\w./-])((?:[A-Za-z_0-9.-]+/)+[A-Za-z_0-9.-]+\."
                         r"(?:c|h|sh|py|ini|md|cmake|toml|cu))\b", text):
        p = m.group(1)
        if p.startswith(("P/", "OUT/", "OUTDIR/", "BUILD/", "/")) or "//" in p:
            continue  # a placeholder prefix, or a URL
        n += 1
        if not (os.path.exists(os.path.join(src, p)) or
                os.path.exists(os.path.join(src, os.path.dirname(doc), p))):
            bad.append(f"{where(m.start())}: {p}: no such file")
    return bad, n


def python_api(src):
    """{"Trainer": its parameters, "Node": ..., "hetring": top-level names, "ht": ...} of the
    package's source, read with ast (torch need not be installed)."""
    import ast
    api = {}
    for mod, path in (("hetring", "python/hetring/__init__.py"),
                      ("ht", "python/hetring/torch.py")):
        tree = ast.parse(open(os.path.join(src, path)).read())
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.ClassDef) and node.name in ("Trainer", "Node"):
                init = [f for f in node.body if isinstance(f, ast.FunctionDef) and
                        f.name == "__init__"][0]
                api[node.name] = {a.arg for a in init.args.args + init.args.kwonlyargs}
        api[mod] = names | ({"torch", "__version__"} if mod == "hetring" else set())
    return api


def check_python(where, text, api):
    """Every keyword a doc passes to Trainer(...) or Node(...) is one of its parameters, and
    every ht.NAME or hetring.NAME is a name of that module."""
    bad, n = [], 0
    for m in re.finditer(r"\b(Trainer|Node)\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text) and i - m.end() < 800:  # the call, to its bracket
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        for k in re.findall(r"[(,]\s*([a-z_]+)=", re.sub(r"`", "", text[m.end() - 1:i])):
            n += 1
            if k not in api[m.group(1)]:
                bad.append(f"{where(m.start())}: {m.group(1)}(..., {k}=): no such parameter")
    for m in re.finditer(r"\b(ht|hetring)\.([A-Za-z_][A-Za-z_0-9]*)\b", text):
        if m.group(2) in ("h", "c", "map", "pc", "_lib"):
            continue  # hetring.h, hetring.c: files, not the package
        n += 1
        if m.group(2) not in api[m.group(1)]:
            bad.append(f"{where(m.start())}: {m.group(1)}.{m.group(2)}: no such name in the "
                       f"package")
    return bad, n


def check_capi(where, text, src):
    """Every hetring_NAME the docs cite is declared in cluster/hetring.h (the public API) or
    cluster/hetring_app.h (what hetring run takes besides)."""
    h = "".join(open(os.path.join(src, "cluster", f)).read()
                for f in ("hetring.h", "hetring_app.h"))
    bad, n = [], 0
    for m in re.finditer(r"\bhetring_[a-z_0-9]+\b", text):
        n += 1
        if not re.search(r"\b" + m.group(0) + r"\b", h):
            bad.append(f"{where(m.start())}: {m.group(0)}: not in cluster/hetring.h")
    return bad, n


def keys_of_table(text, heading):
    """The backticked keys of the first column of the table after the paragraph that starts
    with heading, or of that paragraph where it is prose."""
    i = text.index(heading)
    block = text[i:].split("\n\n")[1 if "|" not in text[i:].split("\n\n")[0] else 0]
    if block.lstrip().startswith("|"):
        firsts = [row.split("|")[1] for row in block.splitlines()[2:]]
        return set(re.findall(r"`([a-z_0-9]+)`", " ".join(firsts)))
    # in prose, what stands in brackets describes a key (its values), and is none
    return set(re.findall(r"`([a-z_0-9]+)`", re.sub(r"\([^()]*\)", "",
                                                      text[i:].split("\n\n")[0])))


def records(readme, metrics, summary, bench=None):
    import json
    text = open(readme).read()
    doc = {"iteration": keys_of_table(text, "An iteration record"),
           "view": keys_of_table(text, "A view record") | {"event"},
           "end": keys_of_table(text, "An end record") | {"event"},
           "summary": keys_of_table(text, "The summary:")}
    got = {k: set() for k in doc}
    for line in open(metrics):
        r = json.loads(line)
        got["iteration" if "event" not in r else r["event"]].update(r)
    got["summary"] = set(json.load(open(summary)))
    # written only where the run has them: a regression run's accuracy, an evaluation
    optional = {"iteration": set(), "view": set(), "end": set(), "summary": set()}
    if bench:
        doc["bench allreduce --json"] = keys_of_table(text, "`bench allreduce --json FILE`")
        got["bench allreduce --json"] = set().union(*(json.loads(l) for l in open(bench)))
        optional["bench allreduce --json"] = {"link_rate_bps"}  # with --netns only
    bad = 0
    for what in doc:
        for k in sorted(got[what] - doc[what]):
            print(f"FAIL: the {what} record has {k}, which README.md does not list")
            bad += 1
        for k in sorted(doc[what] - got[what] - optional[what]):
            print(f"FAIL: README.md lists {k} in the {what} record, which the run did not "
                  f"write")
            bad += 1
        print(f"{what}: {len(got[what])} keys written, {len(doc[what])} documented")
        if len(doc[what]) < 3:
            print(f"FAIL: README.md's {what} table not found (is the heading stale?)")
            bad += 1
    sys.exit(1 if bad else 0)


def main():
    if sys.argv[1] == "records":
        records(*sys.argv[2:])
    hr, src, tests_file = sys.argv[2:5]
    keys = schema_keys(hr)
    api = python_api(src)
    tests = [t for t in open(tests_file).read().split() if t]
    bad, counts = [], [0, 0, 0, 0, 0, 0]
    for doc in DOCS:
        text = open(os.path.join(src, doc)).read()

        def where(off, doc=doc, text=text):
            return f"{doc}:{text.count(chr(10), 0, off) + 1}"
        for i, (b, n) in enumerate([check_keys(where, text, keys),
                                    check_flags(where, text, hr),
                                    check_tests(where, text, tests, src),
                                    check_files(where, text, src, doc),
                                    check_python(where, text, api),
                                    check_capi(where, text, src)]):
            bad += b
            counts[i] += n
    print("cited: %d keys, %d flags, %d tests, %d files, %d Python names, %d C names" %
          tuple(counts))
    for line in bad:
        print("FAIL: " + line)
    # a pattern gone stale would find nothing and pass: each kind is cited dozens of times
    for what, n, least in zip(["keys", "flags", "tests", "files", "Python names", "C names"],
                              counts, [50, 100, 30, 30, 15, 30]):
        if n < least:
            print(f"FAIL: only {n} {what} found in the docs (is the pattern stale?)")
            bad.append(what)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
