"""Write the API reference (docs/api.md) from the comments in protos/.

    python tools/protodoc.py          # regenerate docs/api.md
    python tools/protodoc.py --check  # exit 1 when docs/api.md is stale

protoc compiles every proto with its source info (the comments) into a descriptor
set; this script renders each package's services, messages and enums from it. The
protos are the single source: edit a comment there, not in docs/api.md.
"""

from __future__ import annotations

import importlib.resources
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buf.validate import validate_pb2  # registers the rules' options, so the descriptor set parses them
from google.protobuf import descriptor_pb2, text_format
from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's packages are importable
    sys.path.insert(0, str(ROOT))

from tools import generated_doc  # noqa: E402

PROTO_ROOT = ROOT / "protos"
OUTPUT = ROOT / "docs" / "api.md"

# Field numbers of the descriptor messages, as used in SourceCodeInfo.Location.path.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED, MESSAGE_ENUM, MESSAGE_ONEOF = 2, 3, 4, 8
ENUM_VALUE, SERVICE_METHOD = 2, 2

FieldType = descriptor_pb2.FieldDescriptorProto.Type
SCALARS = {
    value: FieldType.Name(value).removeprefix("TYPE_").lower()
    for value in FieldType.values()
    if value not in (FieldType.TYPE_MESSAGE, FieldType.TYPE_ENUM, FieldType.TYPE_GROUP)
}
WELL_KNOWN_DOCS = "https://protobuf.dev/reference/protobuf/google.protobuf/#"


def compile_descriptors() -> descriptor_pb2.FileDescriptorSet:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "descriptors.pb"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def comment_of(location: descriptor_pb2.SourceCodeInfo.Location | None) -> str:
    """The element's leading (and trailing) comment, dedented, paragraphs kept."""
    if location is None:
        return ""
    text = "\n".join(part for part in (location.leading_comments, location.trailing_comments) if part.strip())
    lines = [line[1:] if line.startswith(" ") else line for line in text.splitlines()]
    return "\n".join(lines).strip()


def one_line(text: str) -> str:
    """A comment fit for a table cell: paragraphs become <br>, pipes are escaped."""
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    return "<br>".join(p for p in paragraphs if p).replace("|", "\\|")


def anchor(full_name: str) -> str:
    return full_name.lower().replace(".", "-")


@dataclass
class Context:
    """Lookups shared while rendering: comments by path, and which types are documented here."""

    locations: dict[tuple[int, ...], descriptor_pb2.SourceCodeInfo.Location]
    documented: set[str]
    map_entries: dict[str, descriptor_pb2.DescriptorProto]

    def comment(self, path: tuple[int, ...]) -> str:
        return comment_of(self.locations.get(path))

    def type_link(self, type_name: str) -> str:
        name = type_name.lstrip(".")
        if name in self.documented:
            return f"[`{name}`](#{anchor(name)})"
        if name.startswith("google.protobuf."):
            return f"[`{name}`]({WELL_KNOWN_DOCS}{name.rsplit('.', 1)[1].lower()})"
        return f"`{name}`"

    def field_type(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        if field.type in (FieldType.TYPE_MESSAGE, FieldType.TYPE_ENUM):
            entry = self.map_entries.get(field.type_name.lstrip("."))
            if entry is not None:
                key, value = entry.field
                return f"map<{self.field_type(key)}, {self.field_type(value)}>"
            base = self.type_link(field.type_name)
        else:
            base = f"`{SCALARS[field.type]}`"
        if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
            return f"repeated {base}"
        if field.proto3_optional:
            return f"optional {base}"
        return base


def walk_messages(
    messages: Iterable[descriptor_pb2.DescriptorProto], prefix: str, path: tuple[int, ...]
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto, tuple[int, ...]]]:
    for index, message in enumerate(messages):
        full = f"{prefix}.{message.name}"
        here = (*path, index)
        yield full, message, here
        yield from walk_messages(message.nested_type, full, (*here, MESSAGE_NESTED))


def walk_enums(
    file: descriptor_pb2.FileDescriptorProto,
) -> Iterator[tuple[str, descriptor_pb2.EnumDescriptorProto, tuple[int, ...]]]:
    for index, enum in enumerate(file.enum_type):
        yield f"{file.package}.{enum.name}", enum, (FILE_ENUM, index)
    for full, message, path in walk_messages(file.message_type, file.package, (FILE_MESSAGE,)):
        for index, enum in enumerate(message.enum_type):
            yield f"{full}.{enum.name}", enum, (*path, MESSAGE_ENUM, index)


def render_service(
    ctx: Context, package: str, service: descriptor_pb2.ServiceDescriptorProto, path: tuple[int, ...]
) -> list[str]:
    full = f"{package}.{service.name}"
    out = [f'<a id="{anchor(full)}"></a>', f"### service `{full}`", "", ctx.comment(path), ""]
    out += ["| RPC | request | response | description |", "|---|---|---|---|"]
    for index, method in enumerate(service.method):
        request = ("stream " if method.client_streaming else "") + ctx.type_link(method.input_type)
        response = ("stream " if method.server_streaming else "") + ctx.type_link(method.output_type)
        description = one_line(ctx.comment((*path, SERVICE_METHOD, index)))
        out.append(f"| `{method.name}` | {request} | {response} | {description} |")
    return [*out, ""]


def render_message(
    ctx: Context, full: str, message: descriptor_pb2.DescriptorProto, path: tuple[int, ...]
) -> list[str]:
    out = [f'<a id="{anchor(full)}"></a>', f"### message `{full}`", "", ctx.comment(path), ""]
    if not message.field:
        return [*out, "No fields.", ""]
    out += ["| field | number | type | description |", "|---|---|---|---|"]
    real_oneofs = {i for i, f in enumerate(message.field) if f.HasField("oneof_index") and not f.proto3_optional}
    for index, field in enumerate(message.field):
        description = one_line(ctx.comment((*path, MESSAGE_FIELD, index)))
        if index in real_oneofs:
            description = f"oneof `{message.oneof_decl[field.oneof_index].name}`: {description}"
        if field.options.deprecated:
            description = f"**deprecated.** {description}"
        rules = field_rules(field)
        if rules:
            description = f"{description}<br>rules: `{rules}`" if description else f"rules: `{rules}`"
        out.append(f"| `{field.name}` | {field.number} | {ctx.field_type(field)} | {description} |")
    return [*out, ""]


_FIELD_RULES: Any = validate_pb2.field  # typed as a plain field by the generated stubs


def field_rules(field: descriptor_pb2.FieldDescriptorProto) -> str:
    """The field's protovalidate rules on one line (`string { min_len: 1 max_len: 256 }`), "" when none."""
    if not field.options.HasExtension(_FIELD_RULES):
        return ""
    text = text_format.MessageToString(field.options.Extensions[_FIELD_RULES], as_one_line=True)
    return text.replace("|", "\\|")


def render_enum(ctx: Context, full: str, enum: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...]) -> list[str]:
    out = [f'<a id="{anchor(full)}"></a>', f"### enum `{full}`", "", ctx.comment(path), ""]
    out += ["| value | number | description |", "|---|---|---|"]
    for index, value in enumerate(enum.value):
        out.append(f"| `{value.name}` | {value.number} | {one_line(ctx.comment((*path, ENUM_VALUE, index)))} |")
    return [*out, ""]


def render(files: descriptor_pb2.FileDescriptorSet) -> str:
    ours = sorted((f for f in files.file if f.package.startswith("cogmesh.")), key=lambda f: (f.package, f.name))
    documented: set[str] = set()
    map_entries: dict[str, descriptor_pb2.DescriptorProto] = {}
    for file in ours:
        for full, message, _ in walk_messages(file.message_type, file.package, (FILE_MESSAGE,)):
            if message.options.map_entry:
                map_entries[full] = message
            else:
                documented.add(full)
        documented |= {full for full, _, _ in walk_enums(file)}
        documented |= {f"{file.package}.{s.name}" for s in file.service}

    packages: dict[str, list[descriptor_pb2.FileDescriptorProto]] = {}
    for file in ours:
        packages.setdefault(file.package, []).append(file)

    out = [
        "# API reference",
        "",
        "<!-- Generated by tools/protodoc.py from the comments in protos/. Do not edit: edit the protos and run",
        "     `python tools/protodoc.py`. CI fails when this file is stale. -->",
        "",
        "Every package, service, RPC, message, field and enum value of cogmesh's protos. The public API is",
        "[`cogmesh.gateway.v1.GatewayService`](#cogmesh-gateway-v1-gatewayservice); the other services are the",
        "suite's internal APIs and its extension points (`ToolService`, `HookService`). Errors are described in",
        "[`cogmesh.common.v1.ErrorReason`](#cogmesh-common-v1-errorreason).",
        "",
        "The public protos (`cogmesh.common.v1`, `cogmesh.gateway.v1`, `cogmesh.tools.v1` and",
        "`cogmesh/policy/v1/hooks.proto`) import no internal proto and are all a client package ships. They",
        "change only compatibly: `make breaking` checks them with buf's FILE rules (generated code keeps",
        "compiling) and the internal ones with WIRE rules (replicas of two versions keep talking), against",
        "the last commit that changed `protos/` (protos/README.md).",
        "",
        "A field's `rules:` are its protovalidate annotations (`buf.validate`): every service refuses a request",
        "that breaks one with INVALID_ARGUMENT naming the field, and clients can check them first with",
        "protovalidate-go or protovalidate-es (protos/README.md, Field rules).",
        "",
        "## Packages",
        "",
    ]
    for package, package_files in packages.items():
        names = ", ".join(f"`{f.name}`" for f in package_files)
        services = ", ".join(
            f"[`{s.name}`](#{anchor(f'{package}.{s.name}')})" for f in package_files for s in f.service
        )
        out.append(f"- [`{package}`](#{anchor(package)}) ({names})" + (f": {services}" if services else ""))
    out.append("")

    for package, package_files in packages.items():
        out += [f'<a id="{anchor(package)}"></a>', f"## `{package}`", ""]
        for file in package_files:
            ctx = Context({tuple(loc.path): loc for loc in file.source_code_info.location}, documented, map_entries)
            for index, service in enumerate(file.service):
                out += render_service(ctx, file.package, service, (FILE_SERVICE, index))
            for full, message, path in walk_messages(file.message_type, file.package, (FILE_MESSAGE,)):
                if not message.options.map_entry:
                    out += render_message(ctx, full, message, path)
            for full, enum, path in walk_enums(file):
                out += render_enum(ctx, full, enum, path)

    # Collapse the blank lines left by elements without a comment.
    text = "\n".join(out)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip() + "\n"


def main() -> int:
    return generated_doc.main(__doc__, OUTPUT, lambda: render(compile_descriptors()), "tools/protodoc.py")


if __name__ == "__main__":
    sys.exit(main())
