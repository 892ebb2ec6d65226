"""Merge bit-identical constants.

Before: several constants (initializers, `Constant` node tensors, in any scope) hold the same
dtype, shape and bytes, e.g. one set of ALBERT weights written once per layer.
After: one of them remains and every consumer reads it. A constant that is a graph output keeps
its name through an `Identity` of the survivor.

How equal constants are found: constants are bucketed by (dtype, shape), which costs nothing;
only buckets with two or more members are fingerprinted (BLAKE2b over the protobuf's raw
bytes, no numpy array in between; large tensors hash a fixed set of samples), and every merge
is confirmed byte for byte. The cost grows with the bytes of the candidates, never with the
square of the count.

Scopes: the survivor is the member in the outermost scope, so a subgraph constant may be
replaced by an outer one, never the reverse. When all members sit in sibling subgraphs (say an
If's two branches), the survivor becomes an initializer read from both; the exporter writes it
in their common parent.

Limits: a constant read by a DequantizeLinear is merged only into one of its own scope (see
`_dequantized_stay_local`); string and sparse tensors are left alone; `Constant` nodes are merged only through their
`value` attribute (not `value_float(s)`/`value_int(s)`, which are tiny by nature).
"""

from __future__ import annotations

import contextlib
import mmap
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import onnx
import onnx_graphsurgeon as gs

from ..defaults import MERGE_MIN_ELEMENTS
from ..graph_utils import (
    ConstantSite,
    NameAllocator,
    Scope,
    collect_constants,
    common_scope,
    graph_outputs_holding,
    held_values,
    is_file_backed,
    is_sparse,
    iter_scopes,
    read_stored,
    replace_uses,
    stored_bytes,
)
from ..progress import progress
from ..report import PassReport
from .base import Estimate, PassBase
from .digests import SAMPLE_BYTES, SAMPLED_ABOVE, blake2b, bytes_digest, sampled_digest as _sampled


MAX_GROUPS_REPORTED = 10


@dataclass
class DuplicateGroup:
    """Constants with equal dtype, shape and bytes. `members[0]` is the survivor."""

    members: list[ConstantSite]

    @property
    def nbytes(self) -> int:
        return self.members[0].nbytes

    @property
    def bytes_saved(self) -> int:
        return self.nbytes * (len(self.members) - 1)

    def to_dict(self) -> dict:
        survivor = self.members[0]
        return {
            "kept": survivor.name,
            "count": len(self.members),
            "dtype": onnx.TensorProto.DataType.Name(survivor.onnx_dtype).lower(),
            "shape": list(survivor.shape),
            "bytes_each": self.nbytes,
            "bytes_saved": self.bytes_saved,
            "merged": [m.name for m in self.members[1:]],
        }


def candidate_sites(graph: gs.Graph, scopes: list[Scope], *, min_elements: int,
                    overridable: frozenset[str], report: PassReport | None = None) -> list[ConstantSite]:
    """Constants that may be merged: dense, not strings, big enough, not protected."""
    out = []
    for site in collect_constants(graph, scopes):
        if site.num_elements < min_elements:
            continue
        if is_sparse(site.tensor) or site.onnx_dtype == onnx.TensorProto.STRING:
            if report is not None:
                report.skip(site.name, "sparse or string tensor")
            continue
        if site.name in overridable:
            if report is not None:
                report.skip(site.name, "overridable graph input (initializer listed as input)")
            continue
        out.append(site)
    return out


def find_duplicate_groups(sites: list[ConstantSite]) -> list[DuplicateGroup]:
    """Group sites whose dtype, shape and bytes are equal. Only groups of two or more."""
    by_layout: dict[tuple, list[ConstantSite]] = defaultdict(list)
    for site in sites:
        by_layout[(site.onnx_dtype, site.shape)].append(site)

    groups: list[DuplicateGroup] = []
    for bucket in progress(by_layout.values(), "find duplicates", total=len(by_layout), unit="layout"):
        if len(bucket) < 2:
            continue
        by_print: dict[bytes, list[ConstantSite]] = defaultdict(list)
        for site in bucket:
            by_print[fingerprint(site.tensor, site.nbytes)].append(site)
        for same_print in by_print.values():
            if len(same_print) > 1:
                groups.extend(confirm_equal(same_print))
    for g in groups:
        g.members.sort(key=survivor_rank)
    groups = [g for g in map(_dequantized_stay_local, groups) if g is not None]
    groups.sort(key=lambda g: -g.bytes_saved)
    return groups


def _dequantized_stay_local(group: DuplicateGroup) -> DuplicateGroup | None:
    """`group` without the members read by a DequantizeLinear that the merge would make read a
    tensor of an outer scope (None when fewer than two are left). onnxruntime 1.32 fails to load
    a subgraph whose DequantizeLinear -> MatMul it fuses into MatMulNBits when the quantized
    weight, or its scale, is an initializer of an outer graph ("TransposeDQWeightsForMatMulNBits Missing
    required weight"): equal weights in an If's two branches, hoisted into the main graph, made
    a loadable model one it refused."""
    members = list(group.members)
    while len(members) > 1:
        scope = common_scope([m.scope for m in members])
        moved = [m for m in members if m.scope is not scope and _read_by_dequantize(m)]
        if not moved:
            return DuplicateGroup(members)
        members = [m for m in members if not any(m is x for x in moved)]
    return None


def _read_by_dequantize(site: ConstantSite) -> bool:
    """Whether a DequantizeLinear reads the constant (weight, scale or zero point: onnxruntime
    wants each of them in the DequantizeLinear's own graph)."""
    return any(node.op == "DequantizeLinear" for node in site.value.outputs)


MAX_DIRECT_COMPARE = 8
MADV_POPULATE_READ = 22  # Linux's (storage/lazy.py's too); Python 3.11's mmap does not name it


def fingerprint(tensor: gs.Constant, nbytes: int) -> bytes:
    """A digest of a tensor's stored bytes: all of them when small, else 64 evenly spaced
    64-byte samples plus the length (only those are read from the file). It only splits
    candidates; equality is always confirmed on the full bytes, so hashing all 350 MB of a
    model (the slow part) is never needed."""
    if nbytes <= SAMPLED_ABOVE:
        return bytes_digest(stored_bytes(tensor))
    if not is_file_backed(tensor):
        data = memoryview(stored_bytes(tensor))
        return _sampled(lambda offset: data[offset:offset + SAMPLE_BYTES], nbytes)
    # from a mapping of the file: a page fault per sample, not a read() that lets go of the GIL.
    # shrink checks beside its passes that onnxruntime loads the input (api/shrinking.py); each
    # read gave that thread the GIL for up to a switch interval: ALBERT's 194 fingerprints (4745
    # reads, 10 ms of CPU) took 180-190 ms
    with _mapped(tensor, populate=False) as view:
        if view is not None:
            return _sampled(lambda offset: view[offset:offset + SAMPLE_BYTES], nbytes)
    return _sampled(lambda offset: read_stored(tensor, offset, SAMPLE_BYTES), nbytes)


@contextlib.contextmanager
def _mapped(tensor: gs.Constant, populate: bool = True) -> Iterator[memoryview | None]:
    """A file-backed constant's stored bytes as a view of a read-only mapping of its file (the
    page cache's own pages: no copy, no system call per read), or None where it has none (held
    in memory, in the spill file, a file shorter than the reference: the reads say so in their
    words). The fingerprints' 12k reads of 64 bytes and the comparisons' copies of 330 MB
    into a buffer were most of the pass's time on the ALBERT sample. `populate`: the page table
    filled at once (a comparison reads every page; a fingerprint 65 of them)."""
    values = held_values(tensor)
    files = getattr(values, "files", None) if is_file_backed(tensor) else None
    fd = None if files is None else files.mappable(values.location, values.tensor.name)
    mapping = None
    if fd is not None and values.length > 0:
        start = values.offset - values.offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(fd, values.offset - start + values.length, access=mmap.ACCESS_READ, offset=start)
        except (OSError, ValueError):
            mapping = None
        else:
            try:  # the page table filled in one call, not a fault per 64 KB as memcmp reads
                if populate:
                    mapping.madvise(MADV_POPULATE_READ)
                else:  # a fingerprint's samples: each fault reads its page, not the read-around
                    mapping.madvise(mmap.MADV_RANDOM)  # window (read_ahead_kb: 8 MB here) about it
            except (OSError, ValueError, AttributeError):  # before Linux 5.14; elsewhere
                pass
    if mapping is None:
        yield None
        return
    try:
        with memoryview(mapping) as whole:
            view = whole[values.offset - start:]
            try:
                yield view
            finally:
                view.release()
    finally:
        mapping.close()


def confirm_equal(sites: list[ConstantSite]) -> list[DuplicateGroup]:
    """Split sites that share a fingerprint into groups of byte-for-byte equal tensors.

    Each site is compared with the first tensor of each group found so far (a memcmp; one
    group in the usual case). Should more than MAX_DIRECT_COMPARE distinct tensors share a
    fingerprint, the rest is split by a digest of all their bytes first, which keeps the cost
    linear in the bytes.
    """
    groups: list[tuple[bytearray, list[ConstantSite]]] = []
    buffers: dict[int, bytearray] = {}
    for site in sites:
        for ref, members in groups:
            if _same_bytes(site, ref, buffers):
                members.append(site)
                break
        else:
            if len(groups) == MAX_DIRECT_COMPARE:
                return _split_by_digest(sites)
            groups.append((_reference(site), [site]))
    return [DuplicateGroup(members) for _, members in groups if len(members) > 1]


def _reference(site: ConstantSite) -> bytearray:
    """The stored bytes of a group's first member, as a bytearray: its `==` with another buffer
    is one memcmp (bytes' against a memoryview goes item by item, 25x slower)."""
    if is_file_backed(site.tensor):
        values = held_values(site.tensor)
        ref = bytearray(values.length)
        values.read_into(memoryview(ref))
        return ref
    return bytearray(stored_bytes(site.tensor))


# A payload in a file is compared with a group's first one through a mapping of its file
# (`_mapped`): one memcmp, which stops at the first byte that differs. Where it cannot be
# mapped, it is read COMPARE_CHUNK bytes at a time into one buffer used again for every chunk
# and every member: ALBERT's 12 copies of each layer (330 MB) each read into new bytes of their
# own made most of `shrink`'s time, in page faults on fresh memory and copies.
COMPARE_CHUNK = 1 << 22


def _same_bytes(site: ConstantSite, ref: bytearray, buffers: dict[int, bytearray]) -> bool:
    """Whether `site`'s stored bytes are `ref`."""
    if not is_file_backed(site.tensor):
        return ref == stored_bytes(site.tensor)
    values = held_values(site.tensor)
    if values.length != len(ref):
        return False
    with _mapped(site.tensor) as view:
        if view is not None:
            return ref == view
    whole = memoryview(ref)
    for start in range(0, len(ref), COMPARE_CHUNK):
        n = min(COMPARE_CHUNK, len(ref) - start)
        buffer = buffers.get(n)
        if buffer is None:
            buffer = buffers[n] = bytearray(n)
        values.read_into(memoryview(buffer), start)
        if buffer != whole[start:start + n]:
            return False
    return True


def _split_by_digest(sites: list[ConstantSite]) -> list[DuplicateGroup]:
    by_digest: dict[bytes, list[ConstantSite]] = defaultdict(list)
    for site in sites:
        by_digest[blake2b(stored_bytes(site.tensor), digest_size=32).digest()].append(site)
    groups: list[DuplicateGroup] = []
    for same in by_digest.values():
        if len(same) > 1:
            ref = stored_bytes(same[0].tensor)
            equal = [s for s in same[1:] if stored_bytes(s.tensor) == ref]
            if equal:
                groups.append(DuplicateGroup([same[0], *equal]))
    return groups


def survivor_rank(site: ConstantSite) -> tuple:
    # Outermost scope first; initializers before Constant nodes; stable otherwise.
    return (site.scope.depth, site.node is not None)


@dataclass(frozen=True)
class MergeDuplicates(PassBase):
    """Merge bit-identical constants (all scopes), in place (module doc)."""

    min_elements: int = MERGE_MIN_ELEMENTS
    name = "merge_duplicates"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """Exact: the same groups the pass merges. details["groups"]: the DuplicateGroups."""
        sites = [s for s in candidate_sites(graph, list(iter_scopes(graph)), min_elements=self.min_elements,
                                            overridable=overridable)
                 if id(s.tensor) not in removed]
        groups = find_duplicate_groups(sites)
        return Estimate(self.name, sum(g.bytes_saved for g in groups),
                        removes=frozenset(id(m.tensor) for g in groups for m in g.members[1:]),
                        details={"groups": groups})

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        scopes = list(iter_scopes(graph))
        sites = candidate_sites(graph, scopes, min_elements=self.min_elements, overridable=overridable, report=report)
        groups = find_duplicate_groups(sites)
        names = NameAllocator(graph)
        for group in groups:
            survivor = survivor_value(group, names)
            for member in group.members:
                if member.value is not survivor:
                    _redirect(member, survivor, scopes)
            report.changed += len(group.members) - 1
            report.bytes_saved += group.bytes_saved
        report.details = {
            "groups": len(groups),
            "constants_merged": report.changed,
            "largest_groups": [g.to_dict() for g in groups[:MAX_GROUPS_REPORTED]],
        }
        return report


def survivor_value(group: DuplicateGroup, names: NameAllocator) -> gs.Tensor:
    """The tensor every member will read from now on."""
    first = group.members[0]
    if first.node is None:
        return first.tensor  # an initializer: the exporter places it where all uses can see it
    if all(first.scope.is_ancestor_of(m.scope) for m in group.members):
        return first.value
    # Constant nodes in sibling scopes: none is visible from all others, so the value becomes
    # an initializer (sharing the stored tensor, no copy) owned by their common scope.
    return gs.Constant(names.new(first.name), held_values(first.tensor))


def _redirect(member: ConstantSite, survivor: gs.Tensor, scopes: list[Scope]) -> None:
    old = member.value
    replace_uses(old, survivor)
    holders = graph_outputs_holding(scopes, old)
    if not holders:
        return  # the Constant node (if any) is now dead; cleanup removes it
    # The constant is a graph output: its name is part of an interface, so it stays, now
    # produced by an Identity of the survivor.
    if member.node is not None:
        member.node.op = "Identity"
        member.node.attrs.clear()
        member.node.inputs.clear()
        member.node.inputs.append(survivor)
        return
    alias = gs.Variable(old.name, dtype=old.dtype, shape=old.shape)
    common_scope(holders).graph.nodes.append(
        gs.Node("Identity", inputs=[survivor], outputs=[alias])
    )
    for scope in holders:
        outs = scope.graph.outputs
        for i, t in enumerate(outs):
            if t is old:
                outs[i] = alias
