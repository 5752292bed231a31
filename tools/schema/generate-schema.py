#!/usr/bin/env python3
"""Generates Kiln's API schema from the SageMaker service model.

Kiln's API messages must carry every member, constraint and enum of the
service's training-job operations, and must not drift from them. So both
artefacts below are generated from one source, botocore's service model
(sagemaker 2017-07-24, preinstalled with botocore 1.43.11 on the project's
machines), and committed; the build never runs this script.

  include/kiln/v1/sagemaker.proto      one message per structure shape, one field
                                       per member, json_name = the member name
  lib/core/schema/shape_checks.cc      the validator's model: a constant per shape
                                       (limits, pattern, enumeration with its lookup
                                       table) and, per structure shape, a check that
                                       walks the generated message through its
                                       accessors in member (= proto field) order;
                                       and the list and map members with a minimum
                                       size, for ParseJson (an empty repeated field
                                       reads as absent, so only the JSON shows them)
  lib/core/schema/training_shapes.json the closure of shapes the training-job
                                       operations use, documentation removed: the
                                       model as data, for people and for the tests'
                                       reference validator

Usage: python3 tools/schema/generate-schema.py [--check] [path/to/service-2.json[.gz]]

--check writes nothing: it exits 1, naming each file and showing the start of
the difference, when a committed artefact is not what the model gives (CI runs
it so).
"""

import difflib
import gzip
import json
import os
import re
import sys

OPERATIONS = [
    "CreateTrainingJob",
    "DescribeTrainingJob",
    "ListTrainingJobs",
    "StopTrainingJob",
    "UpdateTrainingJob",
    "DeleteTrainingJob",
]

# Requests the engine validates on every call: each gets a CheckShape overload
# (declared in core/internal/shapes.h) that skips the descriptor look-up.
TYPED_CHECKS = [
    "CreateTrainingJobRequest",
    "DescribeTrainingJobRequest",
    "ListTrainingJobsRequest",
    "StopTrainingJobRequest",
    "UpdateTrainingJobRequest",
    "DeleteTrainingJobRequest",
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_model(path):
    if path is None:
        import botocore  # noqa: imported only to find its data directory

        path = os.path.join(os.path.dirname(botocore.__file__), "data", "sagemaker",
                            "2017-07-24", "service-2.json.gz")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f), path


def closure(shapes, roots):
    seen, order, stack = set(), [], list(roots)
    while stack:
        name = stack.pop(0)
        if name in seen:
            continue
        seen.add(name)
        order.append(name)
        s = shapes[name]
        if s["type"] == "structure":
            stack.extend(m["shape"] for m in s["members"].values())
        elif s["type"] == "list":
            stack.append(s["member"]["shape"])
        elif s["type"] == "map":
            stack.extend([s["key"]["shape"], s["value"]["shape"]])
    return order


def strip_docs(value):
    if isinstance(value, dict):
        return {k: strip_docs(v) for k, v in value.items() if k != "documentation"}
    if isinstance(value, list):
        return [strip_docs(v) for v in value]
    return value


def snake(name):
    name = name.replace("SageMaker", "Sagemaker").replace("MLflow", "Mlflow")
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


SCALARS = {
    "string": "string",
    "integer": "int32",
    "long": "int64",
    "boolean": "bool",
    # The model's float is 32 bits (the service holds a Java Float): kept as
    # a proto float, kiln/json.h reads it rounded to a float and writes it as
    # the service does (0.1, not 0.10000000149011612 as a widened double).
    "float": "float",
    "double": "double",
}


def field_type(shapes, shape_name):
    """Returns (label, type) for a member of the given shape."""
    s = shapes[shape_name]
    t = s["type"]
    if t in SCALARS:
        return "optional", SCALARS[t]
    if t == "timestamp":
        return "", "google.protobuf.Timestamp"
    if t == "structure":
        return "", shape_name
    if t == "list":
        _, inner = field_type(shapes, s["member"]["shape"])
        return "repeated", inner
    if t == "map":
        _, k = field_type(shapes, s["key"]["shape"])
        _, v = field_type(shapes, s["value"]["shape"])
        return "", f"map<{k}, {v}>"
    raise SystemExit(f"shape {shape_name}: type {t} is not mapped")


def proto_text(shapes, names, source):
    out = [
        "// GENERATED by tools/schema/generate-schema.py from " + source + ".",
        "// Do not edit: change the generator and run it again.",
        "//",
        "// The SageMaker training-job API as protobuf messages. One message per",
        "// structure shape of the service model, one field per member; every field's",
        "// json_name is the service's member name, so kiln/json.h reads and writes the",
        "// service's wire JSON. Enumerations travel as strings, exactly as on the wire;",
        "// kiln/validation.h checks them, with every other constraint of the model.",
        "// Scalar members are proto3 `optional` so that \"absent\" and \"zero\" differ,",
        "// as they do in the service (a boxed member may be absent).",
        "",
        'syntax = "proto3";',
        "",
        "package kiln.v1;",
        "",
        'import "google/protobuf/timestamp.proto";',
        "",
    ]
    for name in names:
        s = shapes[name]
        if s["type"] != "structure" or s.get("exception"):
            continue
        required = set(s.get("required", []))
        out.append(f"message {name} {{")
        for number, (member, spec) in enumerate(s["members"].items(), start=1):
            label, typ = field_type(shapes, spec["shape"])
            prefix = f"{label} " if label else ""
            note = "  // required" if member in required else ""
            out.append(f'  {prefix}{typ} {snake(member)} = {number} [json_name = "{member}"];{note}')
        out.append("}")
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# lib/core/schema/shape_checks.cc

NUMBER_TYPES = ("integer", "long")
UNCHECKED_TYPES = ("boolean", "float", "double", "timestamp")  # presence only
SHAPE_TYPES = {
    "string": "kString", "integer": "kInteger", "long": "kLong", "boolean": "kBoolean",
    "float": "kFloat", "double": "kDouble", "timestamp": "kTimestamp",
    "structure": "kStructure", "list": "kList", "map": "kMap",
}
LOCAL_URI_SHAPE = "S3Uri"  # kiln's extension: file:// wherever an S3 URI is allowed


def cpp_string(text):
    """A C++ string literal (octal escapes: they never swallow a following digit)."""
    out = ['"']
    for byte in text.encode("utf-8"):
        c = chr(byte)
        if c in '\\"':
            out.append("\\" + c)
        elif 32 <= byte < 127:
            out.append(c)
        else:
            out.append("\\%03o" % byte)
    out.append('"')
    return "".join(out)


def camel(member):
    """A member's name as the service writes it in paths."""
    return member[0].lower() + member[1:]


def enum_hash(value, seed):
    """EnumTable::Hash (lib/core/shapes.cc): FNV-1a from the seed, then mixed."""
    h = (2166136261 ^ seed) & 0xFFFFFFFF
    for byte in value.encode("utf-8"):
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    return h


def enum_slots(values):
    """An open-addressing table (linear probing, load <= 1/2) over the values,
    with the seed (of the first 2000) that needs the fewest probes: for most
    enumerations a perfect one."""
    size = 4
    while size < 2 * len(values):
        size *= 2
    best = None
    for seed in range(1, 2001):
        slots, probes = [0] * size, 0
        for index, value in enumerate(values):
            slot = enum_hash(value, seed) & (size - 1)
            probes += 1
            while slots[slot]:
                slot = (slot + 1) & (size - 1)
                probes += 1
            slots[slot] = index + 1
        if best is None or probes < best[0]:
            best = (probes, seed, slots)
        if probes == len(values):
            break
    return best[1], best[2]


def integral(shape_name, key, value):
    if not isinstance(value, int) or abs(value) >= 2**53:
        raise SystemExit(f"shape {shape_name}: {key} {value!r} is not a small integer")
    return value


def path_depth(shapes, name, stack=()):
    """The most path parts a check below a shape of this name can push."""
    s = shapes[name]
    t = s["type"]
    if t == "structure":
        if name in stack:
            raise SystemExit(f"shape {name} contains itself: the checks do not support that")
        return 1 + max([path_depth(shapes, m["shape"], stack + (name,))
                        for m in s["members"].values()] + [0])
    if t == "list":
        return 1 + path_depth(shapes, s["member"]["shape"], stack)
    if t == "map":
        return 1  # the key of an entry
    return 0


def string_constrained(s):
    return any(k in s for k in ("min", "max", "pattern", "enum"))


def min_size(s):
    """The least number of elements a list or map shape allows (0: any)."""
    return s.get("min", 0) if s["type"] in ("list", "map") else 0


def member_check(shapes, member, spec, required, has_checks):
    """C++ lines checking one member of `m`, or [] when nothing can be reported."""
    name = spec["shape"]
    s = shapes[name]
    t = s["type"]
    field, path, const = snake(member), camel(member), "kShape" + name
    has = f"m.has_{field}()"
    present = []
    if t == "string":
        if string_constrained(s):
            present = [f'c.String(m.{field}(), {const}, "{path}");']
    elif t in NUMBER_TYPES:
        if "min" in s or "max" in s:
            present = [f'c.Number(m.{field}(), {const}, "{path}");']
    elif t in UNCHECKED_TYPES:
        pass
    elif t == "structure":
        if has_checks(name):
            present = [f'c.Enter("{path}");', f"Check(c, m.{field}());", "c.Leave();"]
    elif t == "list":
        has = f"m.{field}_size() > 0"
        element = s["member"]["shape"]
        et = shapes[element]["type"]
        sized = "min" in s or "max" in s
        if et == "structure":
            loop = []
            if has_checks(element):
                loop = [f"for (int i = 0, n = m.{field}_size(); i < n; ++i) {{",
                        "  c.EnterElement(i + 1);",
                        f"  Check(c, m.{field}(i));",
                        "  c.Leave();",
                        "}"]
            if sized or loop:
                present = ([f'c.Enter("{path}");'] +
                           ([f"c.ListSize(m.{field}_size(), {const});"] if sized else []) +
                           loop + ["c.Leave();"])
        elif et == "string":
            if sized or string_constrained(shapes[element]):
                present = [f'c.Enter("{path}");',
                           f"c.StringList(m.{field}(), {const}, kShape{element});",
                           "c.Leave();"]
        elif et in NUMBER_TYPES or et in UNCHECKED_TYPES:
            if sized:  # elements carry no checks (as in the model walk)
                present = [f'c.Enter("{path}");', f"c.ListSize(m.{field}_size(), {const});",
                           "c.Leave();"]
        else:
            raise SystemExit(f"list shape {name} of {et}: not supported by the checks")
    elif t == "map":
        has = f"m.{field}_size() > 0"
        key, value = s["key"]["shape"], s["value"]["shape"]
        if shapes[key]["type"] != "string" or shapes[value]["type"] != "string":
            raise SystemExit(f"map shape {name}: only string keys and values are supported")
        present = [f'c.Enter("{path}");',
                   f"c.StringMap(m.{field}(), {const}, kShape{key}, kShape{value});",
                   "c.Leave();"]
    else:
        raise SystemExit(f"member {member} of shape {name}: type {t} is not supported")
    if min_size(s) > 0:
        # A message cannot tell an empty list or map from an absent one; the
        # checker can, when ParseJson tells it which the document held empty.
        if required:
            return ([f"if ({has}) {{"] + ["  " + l for l in present] +
                    [f'}} else if (!c.EmptyList("{path}", {const})) {{',
                     f'  c.Missing("{path}");', "}"])
        return ([f"if ({has}) {{"] + ["  " + l for l in present] +
                ["} else {", f'  c.EmptyList("{path}", {const});', "}"])
    if required and t in ("list", "map"):
        # Required but allowed empty (ListTrainingJobsResponse's summaries): a
        # message cannot tell an empty list from an absent one, and empty is
        # valid, so neither is a violation (ToJson writes the member always).
        required = False
    if required and present:
        return ([f"if ({has}) {{"] + ["  " + l for l in present] + ["} else {",
                f'  c.Missing("{path}");', "}"])
    if required:
        absent = has.replace("_size() > 0", "_size() == 0") if " " in has else f"!{has}"
        return [f'if ({absent}) c.Missing("{path}");']
    if present:
        return [f"if ({has}) {{"] + ["  " + l for l in present] + ["}"]
    return []


def checks_text(shapes, names, source):
    structures = [n for n in names
                  if shapes[n]["type"] == "structure" and not shapes[n].get("exception")]

    memo = {}

    def has_checks(name):
        if name not in memo:
            memo[name] = False  # (the model has no recursive shapes: path_depth says so)
            s = shapes[name]
            required = set(s.get("required", []))
            memo[name] = any(member_check(shapes, m, spec, m in required, has_checks)
                             for m, spec in s["members"].items())
        return memo[name]

    deepest = max(path_depth(shapes, n) for n in structures)

    out = [
        "// GENERATED by tools/schema/generate-schema.py from " + source + ".",
        "// Do not edit: change the generator and run it again.",
        "//",
        "// The service model's constraints as C++ (see core/internal/shapes.h): a",
        "// constant per shape, and per structure shape a check that walks the",
        "// kiln.v1 message generated from it (include/kiln/v1/sagemaker.proto)",
        "// through its accessors, members in model order (= proto field order),",
        "// reporting to a ShapeChecker.",
        "",
        "#include <algorithm>",
        "#include <cstdint>",
        "#include <string>",
        "#include <string_view>",
        "",
        '#include "core/internal/shapes.h"',
        '#include "google/protobuf/descriptor.h"',
        '#include "kiln/v1/sagemaker.pb.h"',
        "",
        "namespace kiln::internal {",
        "namespace {",
        "",
        "// The most path parts a check pushes (a map entry's key included).",
        f"constexpr int kDeepestPath = {deepest};",
        "static_assert(kDeepestPath <= ShapeChecker::kMaxDepth);",
        "",
        "// Patterns, each once, in order of first use.",
    ]
    patterns = []
    for n in names:
        p = shapes[n].get("pattern")
        if p is not None and p not in patterns:
            patterns.append(p)
    for i, p in enumerate(patterns):
        out.append(f"constexpr Pattern kPattern{i}({cpp_string(p)}, {i});")
    out.append("")
    out.append("constexpr const Pattern* kPatterns[] = {")
    for i in range(len(patterns)):
        out.append(f"    &kPattern{i},")
    out.append("};")
    out.append("")
    out.append("// Enumerations: the values in model order, and their lookup table.")
    for n in names:
        values = shapes[n].get("enum")
        if values is None:
            continue
        seed, slots = enum_slots(values)
        out.append(f"constexpr std::string_view kEnumValues{n}[] = {{")
        line = "   "
        for v in values:
            item = f" {cpp_string(v)},"
            if len(line) + len(item) > 99:
                out.append(line)
                line = "   "
            line += item
        out.append(line)
        out.append("};")
        out.append(f"constexpr uint16_t kEnumSlots{n}[] = {{")
        line = "   "
        for v in slots:
            item = f" {v},"
            if len(line) + len(item) > 99:
                out.append(line)
                line = "   "
            line += item
        out.append(line)
        out.append("};")
        out.append(f"constexpr EnumTable kEnum{n}{{kEnumValues{n}, {len(values)}, kEnumSlots{n}, "
                   f"{len(slots) - 1}, {seed}}};")
    out.append("")

    def shape_const(n):
        s = shapes[n]
        fields = [f".name = {cpp_string(n)}", f".type = ShapeType::{SHAPE_TYPES[s['type']]}"]
        if "min" in s:
            fields.append(".has_min = true")
        if "max" in s:
            fields.append(".has_max = true")
        if "min" in s:
            fields.append(f".min = {integral(n, 'min', s['min'])}")
        if "max" in s:
            fields.append(f".max = {integral(n, 'max', s['max'])}")
        if "pattern" in s:
            fields.append(f".pattern = &kPattern{patterns.index(s['pattern'])}")
        if "enum" in s:
            fields.append(f".enum_values = &kEnum{n}")
        if n == LOCAL_URI_SHAPE:
            fields.append(".local_uri_alternative = true")
        if s["type"] == "list":
            fields.append(f".element = &kShape{s['member']['shape']}")
        if s["type"] == "map":
            fields.append(f".key = &kShape{s['key']['shape']}")
            fields.append(f".value = &kShape{s['value']['shape']}")
        text = f"constexpr Shape kShape{n}{{" + ", ".join(fields) + "};"
        if len(text) <= 100:
            return [text]
        return [f"constexpr Shape kShape{n}{{"] + ["    " + f + "," for f in fields[:-1]] + \
               ["    " + fields[-1] + "};"]

    out.append("// Every shape of the model (lists and maps after what they hold).")
    ordered = [n for n in names if shapes[n]["type"] not in ("list", "map")]
    ordered += [n for n in names if shapes[n]["type"] in ("list", "map")]
    for n in ordered:
        out.extend(shape_const(n))
    out.append("")
    out.append("constexpr const Shape* kShapesByName[] = {")
    for n in sorted(names):
        out.append(f"    &kShape{n},")
    out.append("};")
    out.append("")
    out.append("// One check per structure shape.")
    for n in structures:
        out.append(f"void Check(ShapeChecker& c, const v1::{n}& m);")
    out.append("")
    for n in structures:
        s = shapes[n]
        required = set(s.get("required", []))
        body = []
        for member, spec in s["members"].items():
            body.extend(member_check(shapes, member, spec, member in required, has_checks))
        if not body:
            out.append(f"void Check(ShapeChecker&, const v1::{n}&) {{}}")
            out.append("")
            continue
        out.append(f"void Check(ShapeChecker& c, const v1::{n}& m) {{")
        out.extend("  " + l for l in body)
        out.append("}")
        out.append("")
    out.extend([
        "// The list and map members whose shape has a minimum size, or that their",
        "// structure requires while allowing them empty: what ParseJson looks up",
        "// when the document holds one empty (MinSize), and ToJson when the",
        "// message does (WrittenWhenEmpty).",
        "struct SizedMember {",
        "  const google::protobuf::Descriptor* (*message)();",
        "  std::string_view member;  // json_name",
        "  int64_t min;",
        "  bool written_when_empty;  // required, with no minimum",
        "};",
        "",
        "constexpr SizedMember kSizedMembers[] = {",
    ])
    sized = []
    for n in structures:
        for member, spec in shapes[n]["members"].items():
            shape = shapes[spec["shape"]]
            if shape["type"] not in ("list", "map"):
                continue
            least = min_size(shape)
            always = least == 0 and member in shapes[n].get("required", [])
            if least > 0 or always:
                sized.append((n, member, integral(n, "min", least), always))
    for n, member, least, always in sized:
        out.append(f'    {{&v1::{n}::descriptor, "{member}", {least}, '
                   f'{"true" if always else "false"}}},')
    if not sized:  # (an array must not be empty; no field has an empty json_name)
        out.append('    {nullptr, "", 0, false},')
    out.extend([
        "};",
        "",
        "// Any message of the model, by descriptor.",
        "template <typename T>",
        "void CheckMessage(ShapeChecker& c, const google::protobuf::Message& message) {",
        "  if (const T* m = dynamic_cast<const T*>(&message)) {",
        "    Check(c, *m);",
        "  } else {  // the same type, not as the generated class (a DynamicMessage)",
        "    T copy;",
        "    copy.CopyFrom(message);",
        "    Check(c, copy);",
        "  }",
        "}",
        "",
        "struct Dispatch {",
        "  const google::protobuf::Descriptor* (*descriptor)();",
        "  void (*check)(ShapeChecker&, const google::protobuf::Message&);",
        "};",
        "",
        "// In the proto file's message order (Descriptor::index()).",
        "constexpr Dispatch kDispatch[] = {",
    ])
    for n in structures:
        out.append(f"    {{&v1::{n}::descriptor, &CheckMessage<v1::{n}>}},")
    out.extend([
        "};",
        "",
        "// `field`'s entry in kSizedMembers, or null.",
        "const SizedMember* FindSized(const google::protobuf::FieldDescriptor& field) {",
        "  if (!field.is_repeated()) return nullptr;  // (map fields are repeated too)",
        "  for (const SizedMember& m : kSizedMembers) {",
        "    // The generated message's own descriptor, as CheckShape dispatches on.",
        "    if (m.member == field.json_name() && m.message() == field.containing_type()) {",
        "      return &m;",
        "    }",
        "  }",
        "  return nullptr;",
        "}",
        "",
        "}  // namespace",
        "",
        "const Shape* FindShape(std::string_view name) {",
        "  const auto* end = std::end(kShapesByName);",
        "  const auto* it = std::lower_bound(std::begin(kShapesByName), end, name,",
        "                                    [](const Shape* s, std::string_view n) { return s->name < n; });",
        "  return it != end && (*it)->name == name ? *it : nullptr;",
        "}",
        "",
        "int64_t MinSize(const google::protobuf::FieldDescriptor& field) {",
        "  const SizedMember* m = FindSized(field);",
        "  return m != nullptr ? m->min : 0;",
        "}",
        "",
        "bool WrittenWhenEmpty(const google::protobuf::FieldDescriptor& field) {",
        "  const SizedMember* m = FindSized(field);",
        "  return m != nullptr && m->written_when_empty;",
        "}",
        "",
        "const Pattern* const* AllPatterns(int* count) {",
        "  *count = static_cast<int>(std::size(kPatterns));",
        "  return kPatterns;",
        "}",
        "",
        "bool CheckShape(ShapeChecker& checker, const google::protobuf::Message& message) {",
        "  const google::protobuf::Descriptor* d = message.GetDescriptor();",
        "  const int i = d->index();",
        "  if (i < 0 || i >= static_cast<int>(std::size(kDispatch)) || kDispatch[i].descriptor() != d) {",
        "    return false;  // not a message of the model",
        "  }",
        "  kDispatch[i].check(checker, message);",
        "  return true;",
        "}",
        "",
    ])
    for n in TYPED_CHECKS:
        out.extend([
            f"void CheckShape(ShapeChecker& checker, const v1::{n}& message) {{",
            "  Check(checker, message);",
            "}",
            "",
        ])
    out.extend([
        "}  // namespace kiln::internal",
        "",
    ])
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    model, source_path = load_model(args[0] if args else None)
    shapes = model["shapes"]
    roots = []
    operations = {}
    for op in OPERATIONS:
        o = model["operations"][op]
        roots.append(o["input"]["shape"])
        entry = {"input": o["input"]["shape"], "errors": [e["shape"] for e in o.get("errors", [])]}
        if "output" in o:
            roots.append(o["output"]["shape"])
            entry["output"] = o["output"]["shape"]
        operations[op] = entry
    for op in OPERATIONS:
        for e in operations[op]["errors"]:
            roots.append(e)
    names = closure(shapes, roots)
    source = f"botocore {model['metadata'].get('apiVersion')} sagemaker service model"
    try:
        import botocore

        source = f"botocore {botocore.__version__} sagemaker {model['metadata']['apiVersion']} service model"
    except ImportError:
        pass

    schema = {
        "source": source + " (training-job operations, documentation removed)",
        "metadata": strip_docs({k: model["metadata"][k] for k in
                                ("apiVersion", "jsonVersion", "protocol", "signingName", "targetPrefix")}),
        "operations": operations,
        "shapes": {n: strip_docs(shapes[n]) for n in sorted(names)},
    }
    outputs = {
        "lib/core/schema/training_shapes.json": json.dumps(schema, indent=1, sort_keys=True) + "\n",
        "include/kiln/v1/sagemaker.proto": proto_text(shapes, sorted(names), source),
        "lib/core/schema/shape_checks.cc": checks_text(shapes, sorted(names), source),
    }
    if check:
        stale = 0
        for rel, text in outputs.items():
            try:
                with open(os.path.join(ROOT, rel)) as f:
                    committed = f.read()
            except FileNotFoundError:
                committed = ""
            if committed != text:
                stale += 1
                diff = difflib.unified_diff(committed.splitlines(), text.splitlines(),
                                            rel + " (committed)", rel + " (generated)", lineterm="")
                print(f"{rel} differs from what {source} gives:")
                for i, line in enumerate(diff):
                    if i == 40:
                        print("...")
                        break
                    print(line)
        if stale:
            print(f"{stale} generated file(s) out of date: run python3 tools/schema/generate-schema.py")
            sys.exit(1)
        print(f"generated files up to date ({len(names)} shapes from {source_path})")
        return
    for rel, text in outputs.items():
        with open(os.path.join(ROOT, rel), "w") as f:
            f.write(text)
    print(f"{len(names)} shapes from {source_path}")


if __name__ == "__main__":
    main()
