"""A window's partitions merged per board into the batches the sink applies. Pure, no I/O.

One partition's share of a board is never split (its watermark moves once); shares are merged into batches of
at most ``max_players`` players where partitions allow. A board's share has one of three forms (summed deltas,
folded clamps, ``earliest`` steps, see :mod:`ingest.folds`); shares of different forms merge into the more
general one, in partition order. A partition's own dicts are adopted without copying while a batch holds only
them, and copied before anything is merged in: a failed flush builds its batches again from the same folds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flusher.batch import BoardBatch
from hotboard import earliest
from hotboard.boards import DEFAULT
from hotboard.operators import carried, summed
from hotboard.operators import fold as op_fold

if TYPE_CHECKING:
    from ingest.folds import PartitionFold


def merge(folds: dict[int, PartitionFold], max_players: int) -> list[BoardBatch]:
    """The batches. A window's sum that passes 2^53 is not held here but carried to the script, which holds the
    total and counts it (:func:`_carry`). Partitions of one
    player rarely overlap (the record key is the player id), so the common case is adopting one partition's dict
    without copying it; summed shares take a short path (no share object, no form checks), which is most of the
    work when a window touches 100,000 small boards."""
    out: list[BoardBatch] = []
    open_batch: dict[str, BoardBatch] = {}
    for partition, fold in folds.items():
        offset = fold.last_offset
        defs, fast, metas, periods = fold.defs, fold.fast, fold.metas, fold.periods
        for board, deltas in fold.boards.items():
            if metas and board in metas:
                _add(out, open_batch, _share(fold, board), partition, offset, max_players)
                continue
            definition = (defs.get(board) if defs else None) or fast.get(board) or DEFAULT
            batch = open_batch.get(board)
            if batch is None or len(batch.deltas) + len(deltas) > max_players:
                period = periods.get(board) if periods else None
                batch = open_batch[board] = BoardBatch(board, deltas, {partition: offset}, definition, period=period)
                out.append(batch)
            elif (
                batch.states is None
                and batch.steps is None
                and (definition is batch.definition or definition == batch.definition)
            ):
                if len(batch.offsets) == 1:
                    _own(batch)
                _sum_into(batch.deltas, deltas)
                batch.offsets[partition] = offset
            else:
                share = BoardBatch(board, deltas, {}, definition, period=periods.get(board) if periods else None)
                _add(out, open_batch, share, partition, offset, max_players)
        for board in [*fold.ops, *fold.steps]:
            _add(out, open_batch, _share(fold, board), partition, offset, max_players)
    for batch in out:
        _carry(batch)
    return out


def _add(
    out: list[BoardBatch],
    open_batch: dict[str, BoardBatch],
    share: BoardBatch,
    partition: int,
    offset: int,
    max_players: int,
) -> None:
    """One partition's share of a board, in any form: merged into the board's open batch, or a new one."""
    board = share.board
    batch = open_batch.get(board)
    # a share folded under another definition goes alone: the script refuses whichever is stale
    if batch is None or batch.players + share.players > max_players or share.definition != batch.definition:
        share.offsets = {partition: offset}
        open_batch[board] = share
        out.append(share)
        return
    if len(batch.offsets) == 1:
        _own(batch)
    _merge_into(batch, share)
    batch.offsets[partition] = offset


def _share(fold: PartitionFold, board: str) -> BoardBatch:
    definition = fold.defs.get(board) or fold.fast.get(board) or DEFAULT
    metas = fold.metas.get(board)
    period = fold.periods.get(board)
    if board in fold.steps:
        return BoardBatch(board, {}, {}, definition, steps=fold.steps[board], metas=metas, period=period)
    if board in fold.ops:
        return BoardBatch(board, {}, {}, definition, states=fold.ops[board], metas=metas, period=period)
    return BoardBatch(board, fold.boards[board], {}, definition, metas=metas, period=period)


def _own(batch: BoardBatch) -> None:
    """Copy what the batch adopted from its first partition before merging others into it."""
    batch.deltas = dict(batch.deltas)
    if batch.states is not None:
        batch.states = dict(batch.states)
    if batch.steps is not None:
        batch.steps = {p: list(s) for p, s in batch.steps.items()}
    if batch.metas is not None:
        batch.metas = dict(batch.metas)


def _merge_into(batch: BoardBatch, share: BoardBatch) -> None:
    if share.metas:
        batch.metas = {**(batch.metas or {}), **share.metas}
    if batch.steps is not None or share.steps is not None:
        steps = batch.steps if batch.steps is not None else {}
        batch.steps = steps
        desc = batch.definition.order == "desc"
        for player, more in (share.steps or {}).items():
            mine = steps.get(player)
            if mine is None:
                steps[player] = list(more)
            else:
                for step in more:
                    earliest.push(mine, step, desc)
        return
    if batch.states is None and share.states is None:
        _sum_into(batch.deltas, share.deltas)
        return
    states = batch.states if batch.states is not None else {}
    for player, delta in batch.deltas.items():
        states[player] = summed(delta)
    batch.deltas = {}
    batch.states = states
    theirs = share.states if share.states is not None else {p: summed(d) for p, d in share.deltas.items()}
    for player, state in theirs.items():
        states[player] = op_fold(states.get(player), state)


def _sum_into(merged: dict[str, int], deltas: dict[str, int]) -> None:
    """Usually disjoint (one player, one partition): a C-speed update, Python only for the overlap."""
    if merged.keys().isdisjoint(deltas):
        merged.update(deltas)
        return
    overlap = {player: merged[player] + deltas[player] for player in merged.keys() & deltas.keys()}
    merged.update(deltas)
    merged.update(overlap)


def _carry(batch: BoardBatch) -> None:
    """A batch whose summed delta passes +-MAX_EXACT goes in the clamp form, the delta carried exactly
    (:func:`hotboard.operators.carried`); its dict, maybe a partition's own, is replaced, never changed."""
    if batch.deltas and batch.states is None:
        states = carried(batch.deltas)
        if states is not None:
            batch.deltas, batch.states = {}, states
