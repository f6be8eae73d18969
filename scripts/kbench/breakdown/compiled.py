"""What a compiler says it put in each op of a trace: the optimized HLO of every XLA program that ran under the
profiler, which the profiler itself records (its XSpace's "/host:metadata" plane holds each program's HloProto, as
XProf's op profile reads it) beside the trace: JAX's and TensorFlow's both. Read here with a protobuf wire reader of
a few lines (the fields below, from xla's hlo.proto and tsl's xplane.proto), so that no framework, protobuf module or
XProf is needed to read it, in the cell or later.

contents(xspace) -> {program: {instruction: Content}}, each program under its module name and its name with the
program id as the trace names it ("jit_f(4)", "jit_f.4"): a fusion's content is the opcodes of its fused computation
and of every computation called from there, custom calls as "custom-call:<target>"."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Field numbers. xplane.proto: XSpace.planes 1, .errors 2, .warnings 3; XPlane.name 2, .event_metadata 4 (map entry: key 1, value 2),
# .stat_metadata 5; XEventMetadata.name 2, .stats 5; XStat.metadata_id 1, .int64/uint64 3-4, .bytes 6;
# XStatMetadata.id 1, .name 2. hlo.proto: HloProto.hlo_module 1; HloModuleProto.name 1, .computations 3;
# HloComputationProto.name 1, .instructions 2, .id 5; HloInstructionProto.name 1, .opcode 2, .metadata 7
# (OpMetadata.op_name 2), .custom_call_target 28, .called_computation_ids 38 (packed).
METADATA_PLANE = "/host:metadata"


@dataclass(frozen=True)
class Content:
    opcodes: frozenset          # its own and those of everything it calls
    op_names: tuple             # the framework's scopes of those instructions (OpMetadata.op_name)
    fusion: bool


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf: bytes):
    """(field number, value) of one message: an int for a varint, bytes for the rest."""
    i, end = 0, len(buf)
    while i < end:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i:i + length], i + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError(f"wire type {wire} at byte {i}: not a protobuf message this reader knows")
        yield number, value


def messages(xspace: bytes) -> list[str]:
    """The errors and warnings the profiler put in its XSpace (XSpace.errors 2, .warnings 3): tsl's CUPTI collector
    says there when it dropped GPU events ("Detected GPU events dropped on <host>: ...")."""
    return [value.decode(errors="replace") for number, value in fields(xspace) if number in (2, 3)]


def _packed(value) -> list[int]:
    if isinstance(value, int):
        return [value]
    found, i = [], 0
    while i < len(value):
        number, i = _varint(value, i)
        found.append(number)
    return found


def hlo_protos(xspace: bytes) -> list[tuple[str, int | None, bytes]]:
    """(event metadata name, program id, serialized HloProto) of every program in the metadata plane."""
    found = []
    for number, plane in fields(xspace):
        if number != 1:
            continue
        parts = list(fields(plane))
        if next((v for n, v in parts if n == 2), b"") != METADATA_PLANE.encode():
            continue
        stat_names = {}
        for n, entry in parts:
            if n == 5:
                meta = dict(fields(dict(fields(entry)).get(2, b"")))
                stat_names[meta.get(1, 0)] = meta.get(2, b"").decode()
        for n, entry in parts:
            if n != 4:
                continue
            meta = list(fields(dict(fields(entry)).get(2, b"")))
            name = next((v.decode() for k, v in meta if k == 2), "")
            proto, program = None, None
            for k, stat in meta:
                if k != 5:
                    continue
                stat = dict(fields(stat))
                kind = stat_names.get(stat.get(1))
                if kind == "Hlo Proto" and 6 in stat:
                    proto = stat[6]
                elif kind == "program_id":
                    program = stat.get(3, stat.get(4))
            if proto:
                found.append((name, program, proto))
    return found


def module_contents(proto: bytes) -> tuple[str, dict[str, Content]]:
    """An HloProto's module name and each instruction's Content."""
    module = dict(fields(proto)).get(1, b"")
    name, computations = "", {}
    for n, value in fields(module):
        if n == 1:
            name = value.decode()
        elif n == 3:
            comp_id, instructions = None, []
            for k, v in fields(value):
                if k == 5:
                    comp_id = v
                elif k == 2:
                    instructions.append(_instruction(v))
            computations[comp_id] = instructions
    memo: dict = {}

    def reach(comp_id, seen=()) -> tuple[set, list]:
        if comp_id in memo:
            return memo[comp_id]
        opcodes, names = set(), []
        for _, (opcode, op_name, called) in computations.get(comp_id, []) if comp_id not in seen else []:
            opcodes.add(opcode)
            names.append(op_name)
            for inner in called:
                more, more_names = reach(inner, (*seen, comp_id))
                opcodes |= more
                names += more_names
        memo[comp_id] = (opcodes, names)
        return memo[comp_id]

    contents = {}
    for instructions in computations.values():
        for inst_name, (opcode, op_name, called) in instructions:
            opcodes, names = {opcode}, [op_name]
            for comp_id in called:
                more, more_names = reach(comp_id)
                opcodes |= more
                names += more_names
            contents[inst_name] = Content(frozenset(opcodes), tuple(n for n in names if n),
                                          opcode.startswith("fusion"))
    return name, contents


def _instruction(buf: bytes) -> tuple[str, tuple[str, str, list[int]]]:
    name = opcode = target = op_name = ""
    called = []
    for n, v in fields(buf):
        if n == 1:
            name = v.decode()
        elif n == 2:
            opcode = v.decode()
        elif n == 7:
            op_name = dict(fields(v)).get(2, b"").decode(errors="replace")
        elif n == 28:
            target = v.decode(errors="replace")
        elif n == 38:
            called += _packed(v)
    if opcode == "custom-call" and target:
        opcode = f"custom-call:{target.lower()}"
    return name, (opcode, op_name, called)


def contents(xspace_path: str | Path) -> dict[str, dict[str, Content]]:
    """Every XLA program in an XSpace file, by the names a trace gives it (module name; with its program id as
    "name(id)" and "name.id")."""
    found = {}
    for label, program, proto in hlo_protos(Path(xspace_path).read_bytes()):
        name, by_instruction = module_contents(proto)
        for key in {name, label, *((f"{name}({program})", f"{name}.{program}") if program is not None else ())}:
            if key:
                found[key] = by_instruction
    return found


def as_json(found: dict[str, dict[str, Content]]) -> dict:
    """Kept inside the trace (kbench.breakdown.measure): {program: {instruction: [opcodes, op_names, fusion]}},
    fusions and single ops alike, the smallest form that reads back."""
    return {program: {inst: [sorted(c.opcodes), sorted(set(c.op_names)), c.fusion] for inst, c in by_inst.items()
                      if c.fusion or c.opcodes - {"parameter", "constant", "tuple", "get-tuple-element"}}
            for program, by_inst in found.items()}


def from_json(kept: dict) -> dict[str, dict[str, Content]]:
    return {program: {inst: Content(frozenset(ops), tuple(names), bool(fusion))
                      for inst, (ops, names, fusion) in by_inst.items()} for program, by_inst in kept.items()}
