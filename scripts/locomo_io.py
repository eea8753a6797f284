"""What the LoCoMo scripts share: PATH@TAG arguments and reading answer files (plain or .gz).
Standard library only."""
import gzip


def split_tag(arg):
    """(path, tag) of PATH@TAG; a '@' followed by a '/' belongs to the path; tag '' when none."""
    path, at, tag = arg.rpartition("@")
    if not at or "/" in tag:
        return arg, ""
    return path, tag


def lines(path):
    """(line number, text) of each non-blank line of a text file, gzipped when it ends in .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line
