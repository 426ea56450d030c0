"""Lines per layer, the glue's share, and the house limits (file and function sizes, file names).

    python3 tools/sz.py            # print the table; exit 0
    python3 tools/sz.py --strict   # exit 1 when a house limit is broken (used by nobody yet: a soft budget)

Layers are the folders under csrc/ (runtime -> kernels -> compiler/ccl -> torch glue) plus the Python package.
A function is counted from a line at column 0 that opens a body (`{` ending a signature) to the next `}` at
column 0: the house style puts both there, so the count needs no parser.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = [("runtime", "csrc/runtime"), ("kernels", "csrc/kernels"), ("compiler", "csrc/compiler"),
          ("ccl", "csrc/ccl"), ("glue (C++)", "csrc/torch")]
C_EXT = (".c", ".h", ".cpp", ".inc")
GLUE_BUDGET = 0.18          # issue 17: at most 18 % of the C/C++ lines
MAX_FILE, MAX_FUNC = 1500, 150
BAD_NAME = re.compile(r"(^|_)(extra|misc|small|common)(\.|_)")
ISA_TAIL = re.compile(r"(avx512|avx2|amx|neon|sve2?|x86_64|fp16|bf16|f32|f64|int8)$")


def bad_name(base):
    stem = base.rsplit(".", 1)[0]
    numbered = re.search(r"[a-z_]\d+$", stem) and not ISA_TAIL.search(stem)
    return bool(BAD_NAME.search(base) or numbered)


def files(folder, exts):
    out = []
    for d, _, names in os.walk(os.path.join(ROOT, folder)):
        out += [os.path.join(d, n) for n in sorted(names) if n.endswith(exts)]
    return out


def lines(path):
    with open(path, errors="replace") as f:
        return f.read().split("\n")


def long_functions(path):
    text, found, start, name = lines(path), [], None, ""
    for i, ln in enumerate(text):
        if start is None and ln.endswith("{") and ln[:1] not in (" ", "\t", "#", "/", "}", "") \
                and not re.match(r"(struct|class|union|enum|typedef|namespace|extern|static const|const|template)\b", ln) \
                and "=" not in ln.split("(")[0]:
            start, name = i, ln
            j = i
            while "(" not in name and j > 0:      # signature split over lines: look back for the name
                j -= 1
                name = text[j] + " " + name
        elif start is not None and ln.startswith("}"):
            n = i - start + 1
            if n > MAX_FUNC:
                m = re.search(r"([A-Za-z_][A-Za-z0-9_:]*)\s*\(", name)
                found.append((m.group(1) if m else name.strip()[:40], start + 1, n))
            start = None
    return found


def main():
    strict = "--strict" in sys.argv
    total, rows, broken = 0, [], []
    for label, folder in LAYERS:
        n = sum(len(lines(p)) for p in files(folder, C_EXT))
        rows.append((label, n))
        total += n
    glue = dict(rows)["glue (C++)"]
    py = sum(len(lines(p)) for p in files("torchneuron", (".py",)))
    print("lines per layer (C/C++ under csrc/, Python in torchneuron/):")
    for label, n in rows:
        print(f"  {label:<12} {n:>7}  {100.0 * n / total:5.1f} %")
    print(f"  {'C/C++ total':<12} {total:>7}")
    print(f"  {'python':<12} {py:>7}")
    share = glue / total
    print(f"glue share {100 * share:.1f} % (soft budget {100 * GLUE_BUDGET:.0f} %)"
          + ("" if share <= GLUE_BUDGET else "  OVER BUDGET"))
    if share > GLUE_BUDGET:
        broken.append("glue share")
    for folder in ("csrc", "torchneuron", "tests", "bench"):
        for p in files(folder, C_EXT + (".py",)):
            rel = os.path.relpath(p, ROOT)
            n = len(lines(p))
            if n > MAX_FILE:
                print(f"file over {MAX_FILE} lines: {rel} ({n})")
                broken.append(rel)
            if bad_name(os.path.basename(p)):
                print(f"file named for history, not content: {rel}")
                broken.append(rel)
            if p.endswith(C_EXT) and folder == "csrc":
                for fn, at, k in long_functions(p):
                    print(f"function over {MAX_FUNC} lines: {rel}:{at} {fn} ({k})")
                    broken.append(f"{rel}:{fn}")
    print(f"house limits broken: {len(broken)}")
    return 1 if strict and broken else 0


if __name__ == "__main__":
    sys.exit(main())
