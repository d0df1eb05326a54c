"""Finding traces under the roots and cutting them into tasks."""
import os

TRACE_EXTENSION = ".pstrace"


def find_traces(roots, problems):
    """Every *.pstrace file under each root (a root may be a trace itself),
    sorted; a root that cannot be read is one line in `problems`."""
    found = []
    for root in roots:
        if os.path.isfile(root):
            found.append(root)
            continue
        if not os.path.isdir(root):
            problems.append({"trace": root, "problem": "%s: no such file or directory" % root})
            continue

        def complain(error, root=root):
            problems.append({"trace": error.filename or root,
                             "problem": "%s: cannot be read: %s" % (error.filename or root,
                                                                      error.strerror)})

        for directory, dirs, files in os.walk(root, onerror=complain):
            dirs.sort()
            found.extend(os.path.join(directory, f) for f in sorted(files)
                         if f.endswith(TRACE_EXTENSION))
    return found


def batches(traces, size):
    """Tasks of at most `size` traces, each from one directory: a
    directory's symbol archive (pinshim archive) is read once per task, and
    a directory is what `pinshim report` merges as one group."""
    by_dir = {}
    for t in traces:
        by_dir.setdefault(os.path.dirname(t), []).append(t)
    out = []
    for directory in sorted(by_dir):
        files = by_dir[directory]
        out.extend(files[i:i + size] for i in range(0, len(files), size))
    return out
