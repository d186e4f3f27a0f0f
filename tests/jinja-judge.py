#!/usr/bin/env python3
# jinja-judge.py - Python's jinja2, set up the way Hugging Face's
# apply_chat_template sets it up, as the judge of the C interpreter
# (tokenizer-svc/jinja.h).
#
#   jinja-judge.py write DIR   render every case, write DIR/expected/*.json
#   jinja-judge.py check DIR   render again and compare with DIR/expected
#
# DIR holds templates/*.jinja, contexts.json (named render contexts) and
# snippets.json (small templates, each with its own context). Every
# template is rendered with every context. A case records the output, or
# the error jinja2 raised ("raised: msg" for raise_exception, "syntax: ..."
# when the template does not compile). expected/contexts.json has each
# context as JSON text, which is what the C side renders with. test-jinja
# (ctest) renders the same cases in C and requires the same bytes, so the
# tests need no Python; test-jinja-judge runs `check` so that the stored
# expectations stay what jinja2 says.
#
# The environment is transformers' (chat_template_utils.py): an immutable
# sandbox with trim_blocks and lstrip_blocks, the loopcontrols extension,
# the {% generation %} block, tojson = json.dumps(ensure_ascii=False,
# sort_keys=False), raise_exception and strftime_now. strftime_now reads a
# fixed time (NOW, in UTC) so that the outputs do not depend on the clock.
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1767225600  # 2026-01-01T00:00:00Z; the C test passes the same


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, ctx):
    try:
        t = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - the kind of failure is what is recorded
        return {"error": "syntax: %s" % e}
    try:
        return {"output": t.render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": "raised: %s" % e.message}
        return {"error": "%s: %s" % (type(e).__name__, e)}
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (type(e).__name__, e)}


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def cases(d):
    """(expected file name, list of case dicts) for everything in d."""
    env = environment()
    contexts = json.loads(read_text(os.path.join(d, "contexts.json")))
    out = []
    for name in sorted(os.listdir(os.path.join(d, "templates"))):
        if not name.endswith(".jinja"):
            continue
        src = read_text(os.path.join(d, "templates", name))
        rows = []
        for cname in contexts:
            row = {"context": cname}
            row.update(render(env, src, contexts[cname]))
            rows.append(row)
        out.append((name[: -len(".jinja")] + ".json", {"template": name, "cases": rows}))
    snippets = json.loads(read_text(os.path.join(d, "snippets.json")))
    rows = []
    for s in snippets:
        ctx = s.get("context", {})
        row = {"name": s["name"], "template": s["template"], "context": json.dumps(ctx, ensure_ascii=False)}
        row.update(render(env, s["template"], ctx))
        rows.append(row)
    out.append(("snippets.json", {"snippets": rows}))
    # the contexts as the JSON text the C test hands to jinja_render
    out.append(("contexts.json", {"contexts": {k: json.dumps(v, ensure_ascii=False) for k, v in contexts.items()}}))
    return out


def dump(obj):
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.stderr.write("usage: jinja-judge.py write|check DIR\n")
        return 2
    d = sys.argv[2]
    exp = os.path.join(d, "expected")
    bad = 0
    n = 0
    for fname, obj in cases(d):
        path = os.path.join(exp, fname)
        text = dump(obj)
        n += len(obj.get("cases", obj.get("snippets", [])))
        if sys.argv[1] == "write":
            os.makedirs(exp, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            continue
        try:
            old = read_text(path)
        except OSError:
            old = None
        if old != text:
            bad += 1
            sys.stderr.write("jinja-judge: %s differs from what jinja2 %s renders now\n" % (path, jinja2.__version__))
    if sys.argv[1] == "check":
        print("jinja-judge: %d cases, %d files differ (jinja2 %s)" % (n, bad, jinja2.__version__))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
