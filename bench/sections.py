"""A generated section of docs/benchmarks.md, between its own begin and end markers.

Shared by the section reports (bench/fabric_report.py, bench/k8s_start_report.py).
"""


def splice(doc, text, begin, end):
    """Replaces the section between begin and end in doc, or adds it before "## Findings"."""
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        return head + text + "\n" + tail
    if "\n## Findings" in doc:
        head, tail = doc.split("\n## Findings", 1)
        return head + "\n" + text + "\n## Findings" + tail
    return doc.rstrip("\n") + "\n\n" + text


def write_section(path, text, begin, end):
    """Splices text (which starts with begin and ends with end) into the page at path, in place."""
    with open(path) as f:
        doc = f.read()
    with open(path, "w") as f:
        f.write(splice(doc, text, begin, end))
