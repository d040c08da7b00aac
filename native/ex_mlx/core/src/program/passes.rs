//! The passes over a checked program: each a function of its blocks, run
//! when the program is made or prepared (crate::program's `Program`).

use std::sync::Arc;

use mlx_rs::{Array, Dtype};

use super::run::Run;
use super::{
    any_instruction, nested_blocks, Block, CompiledRun, FusedOps, Instruction, OpCall, COMPILED_RUN,
};
use crate::device::Device;
use crate::error::Result;
use crate::fusion::FusedProgram;
use crate::ops::params::Param;
use crate::ops::table::{DtypeRule, Op};

/// Folds a `reshape` of a `reshape`, and a `transpose` of a `transpose`,
/// into one op of the inner one's input, where nothing else reads the inner
/// result and at most one type is cast to (a cast commutes with a
/// rearrangement, and casting twice to one type is casting once; the folded
/// op casts to that type): the inner op is dropped (its slot is never
/// written, as nothing reads it). Both are exact rearrangements, so the
/// values are the same with one MLX node fewer; Bumblebee's attention makes
/// several such pairs a layer. Runs in `block` and the blocks nested in it,
/// each pair within one block. Returns how many ops it dropped.
pub(super) fn fold_rearrangements(block: &mut Block, reads: &[u32]) -> usize {
    let mut dropped = 0;
    for ins in &mut block.instructions {
        for nested in nested_blocks_mut(ins) {
            dropped += fold_rearrangements(nested, reads);
        }
    }
    // (the instruction of this block that writes a slot, by slot)
    let mut writer = std::collections::HashMap::new();
    let mut drop = vec![false; block.instructions.len()];
    for k in 0..block.instructions.len() {
        let Instruction::Op(outer) = &block.instructions[k] else {
            continue;
        };
        if let Some(&j) = outer.inputs.first().and_then(|s| writer.get(s)) {
            // (only ops are recorded as writers)
            let Instruction::Op(inner) = &block.instructions[j] else {
                continue;
            };
            if reads.get(inner.first) == Some(&1) {
                if let Some(params) = folded(inner, outer) {
                    let (input, cast) = (inner.inputs[0], inner.cast);
                    if let Instruction::Op(outer) = &mut block.instructions[k] {
                        outer.inputs[0] = input;
                        outer.params = params;
                        outer.cast = outer.cast.or(cast);
                    }
                    drop[j] = true;
                    dropped += 1;
                }
            }
        }
        if let Instruction::Op(call) = &block.instructions[k] {
            if call.results == 1 {
                writer.insert(call.first, k);
            }
        }
    }
    let mut k = 0;
    block.instructions.retain(|_| {
        k += 1;
        !drop[k - 1]
    });
    dropped
}

/// Merges an op equal to an earlier op of its block (the same op, input
/// slots, parameters, cast and number of results) into that earlier one:
/// later reads of its results read the earlier op's, and it is dropped (its
/// slots are never written). Every op of the op table is a function of its
/// inputs and parameters, so the values are the same with fewer MLX nodes;
/// a Bumblebee decoder computes its attention mask and its rotary
/// embedding's table lookups again in every layer, from the same slots.
/// Ops of a nested block merge with earlier ops of that block; reads in
/// nested blocks of an outer op's results follow the outer merge. Inputs
/// are compared after earlier merges, so chains of equal ops merge whole.
/// Returns how many ops it dropped.
/// Groups of fused or compiled ops, which passes make later, leave the
/// block unchanged.
pub(super) fn merge_equal_ops(block: &mut Block) -> usize {
    let grouped =
        |ins: &Instruction| matches!(ins, Instruction::Fused(_) | Instruction::Compiled(_));
    if any_instruction(block, &grouped) {
        return 0;
    }
    merge_in(block, &mut std::collections::HashMap::new())
}

/// [`merge_equal_ops`] in `block`, `renamed` mapping each dropped op's
/// result slots to the kept op's.
fn merge_in(block: &mut Block, renamed: &mut std::collections::HashMap<usize, usize>) -> usize {
    let rename = |slots: &mut Vec<usize>, renamed: &std::collections::HashMap<usize, usize>| {
        for s in slots.iter_mut() {
            if let Some(&t) = renamed.get(s) {
                *s = t;
            }
        }
    };
    let mut dropped = 0;
    // (the kept ops of this block by op and inputs: their index in `kept`)
    let mut seen: std::collections::HashMap<(Op, Vec<usize>), Vec<usize>> =
        std::collections::HashMap::new();
    let mut kept: Vec<Instruction> = Vec::with_capacity(block.instructions.len());
    for mut ins in std::mem::take(&mut block.instructions) {
        match &mut ins {
            // (an op without inputs makes a buffer of its own, which its
            // one reader may write in place: merged, every reader but the
            // last would copy it)
            Instruction::Op(call) if call.inputs.is_empty() => {}
            Instruction::Op(call) => {
                rename(&mut call.inputs, renamed);
                let key = (call.op, call.inputs.clone());
                let earlier = seen.get(&key).and_then(|indices| {
                    indices.iter().find_map(|&k| match &kept[k] {
                        Instruction::Op(e)
                            if e.params == call.params
                                && e.cast == call.cast
                                && e.results == call.results =>
                        {
                            Some(e.first)
                        }
                        _ => None,
                    })
                });
                if let Some(first) = earlier {
                    for r in 0..call.results {
                        renamed.insert(call.first + r, first + r);
                    }
                    dropped += 1;
                    continue;
                }
                seen.entry(key).or_default().push(kept.len());
            }
            Instruction::Loop(l) => rename(&mut l.initial, renamed),
            // (branches read only through their blocks; fused and compiled
            // groups are not in a program being made: see merge_equal_ops)
            Instruction::Branch(_) | Instruction::Fused(_) | Instruction::Compiled(_) => {}
        }
        for nested in nested_blocks_mut(&mut ins) {
            dropped += merge_in(nested, renamed);
        }
        kept.push(ins);
    }
    block.instructions = kept;
    rename(&mut block.outputs, renamed);
    dropped
}

/// Drops every op whose results nothing reads, anywhere in the program
/// (no instruction's input, no block's output), until none is left: the
/// op table's ops are functions of their inputs alone, so the values read
/// are the same with fewer MLX nodes, and what a dropped op read may have
/// no reader left (ExMLX.Compiler gives a loop's planned caches back in
/// Nx's layout after the loop, which Bumblebee's generation never reads).
/// Slots are written once in a program, so a slot nothing reads is read
/// nowhere. Loops and branches stay. Returns how many ops it dropped.
pub(super) fn drop_unread_ops(block: &mut Block, slots: usize) -> usize {
    let mut dropped = 0;
    loop {
        let reads = read_counts(block, slots);
        let unread = |call: &OpCall| (call.first..call.first + call.results).all(|s| reads[s] == 0);
        let now = drop_ops_in(block, &unread);
        if now == 0 {
            return dropped;
        }
        dropped += now;
    }
}

/// Drops the ops of `block` and the blocks nested in it for which `unread`
/// holds; returns how many.
fn drop_ops_in(block: &mut Block, unread: &dyn Fn(&OpCall) -> bool) -> usize {
    let before = block.instructions.len();
    block
        .instructions
        .retain(|ins| !matches!(ins, Instruction::Op(call) if unread(call)));
    let mut dropped = before - block.instructions.len();
    for ins in &mut block.instructions {
        for nested in nested_blocks_mut(ins) {
            dropped += drop_ops_in(nested, unread);
        }
    }
    dropped
}

/// The parameters of `outer` applied straight to `inner`'s input, when the
/// two fold into one op (see [`fold_rearrangements`]).
fn folded(inner: &OpCall, outer: &OpCall) -> Option<Vec<Param>> {
    let cast_once = inner.cast.is_none() || outer.cast.is_none() || inner.cast == outer.cast;
    if inner.op != outer.op || !cast_once || inner.results != 1 || inner.inputs.len() != 1 {
        return None;
    }
    match (outer.op, inner.params.as_slice(), outer.params.as_slice()) {
        (Op::reshape, [Param::Shape(_)], [Param::Shape(_)]) => Some(outer.params.clone()),
        // outer axis i is inner axis q[i], which is the input's axis p[q[i]]
        (Op::transpose, [Param::OptInts(Some(p))], [Param::OptInts(Some(q))]) => {
            let n = p.len();
            let valid = |perm: &[i64]| {
                let mut seen = vec![false; perm.len()];
                perm.iter().all(|&a| {
                    (0..n as i64).contains(&a) && !std::mem::replace(&mut seen[a as usize], true)
                })
            };
            if q.len() != n || !valid(p) || !valid(q) {
                return None;
            }
            let composed = q.iter().map(|&a| p[a as usize]).collect();
            Some(vec![Param::OptInts(Some(composed))])
        }
        _ => None,
    }
}

/// An op of boolean result (a comparison, a logical op, `all`, `any`,
/// `is_nan`...: the op table's `bool` rule) read only as a boolean
/// ([`Op::boolean_inputs`]: `select`'s condition, a logical op's operand)
/// keeps MLX's boolean result instead of being cast to the type it declares
/// (Nx's u8): its reader converts it back to a boolean, so the cast and the
/// conversion were two more ops, and on a GPU two more kernels (Nx's
/// gradient of `max` and `min` has two such selects per use; Bumblebee's
/// decoding step a few chains of logical ops). The values the program gives
/// are the same.
pub(super) fn keep_boolean_conditions(main: &mut Block, slots: usize) {
    let mut read_otherwise = vec![false; slots];
    mark_reads(main, &mut read_otherwise);
    relax_comparisons(main, &read_otherwise);
}

/// Marks every slot read other than as a boolean ([`Op::boolean_inputs`]).
pub(super) fn mark_reads(block: &Block, read_otherwise: &mut [bool]) {
    visit_reads(block, &mut |slot, condition| {
        if !condition {
            read_otherwise[slot] = true
        }
    });
}

/// How many times each of `slots` slots is read in `block` and the blocks
/// nested in it (instructions' inputs and blocks' outputs).
pub(super) fn read_counts(block: &Block, slots: usize) -> Vec<u32> {
    let mut reads = vec![0u32; slots];
    visit_reads(block, &mut |slot, _| reads[slot] += 1);
    reads
}

/// Calls `f(slot, as_boolean)` for every read of a slot in `block` and the
/// blocks nested in it (an instruction's inputs, a block's outputs;
/// `as_boolean` for an op's [`Op::boolean_inputs`]).
pub(super) fn visit_reads(block: &Block, f: &mut impl FnMut(usize, bool)) {
    for &s in &block.outputs {
        f(s, false)
    }
    for ins in &block.instructions {
        visit_instruction_reads(ins, f);
    }
}

/// [`visit_reads`] for one instruction and the blocks nested in it.
pub(super) fn visit_instruction_reads(ins: &Instruction, f: &mut impl FnMut(usize, bool)) {
    let each = |slots: &[usize], f: &mut dyn FnMut(usize, bool)| {
        for &s in slots {
            f(s, false)
        }
    };
    match ins {
        Instruction::Op(call) => {
            let booleans = call.op.boolean_inputs();
            for (k, &s) in call.inputs.iter().enumerate() {
                f(s, booleans.contains(&k))
            }
        }
        Instruction::Fused(group) => {
            for call in &group.ops {
                each(&call.inputs, f)
            }
        }
        Instruction::Compiled(run) => {
            for call in &run.ops {
                each(&call.inputs, f)
            }
        }
        Instruction::Loop(l) => {
            each(&l.initial, f);
            visit_reads(&l.condition, f);
            visit_reads(&l.body, f);
        }
        Instruction::Branch(b) => {
            for (pred, body) in &b.clauses {
                visit_reads(pred, f);
                visit_reads(body, f);
            }
            visit_reads(&b.otherwise, f);
        }
    }
}

pub(super) fn relax_comparisons(block: &mut Block, read_otherwise: &[bool]) {
    for ins in &mut block.instructions {
        match ins {
            Instruction::Op(call) => {
                if call.op.results() == [DtypeRule::Bool]
                    && call.cast == Some(Dtype::Uint8)
                    && !read_otherwise[call.first]
                {
                    call.cast = None;
                }
            }
            nested => {
                for block in nested_blocks_mut(nested) {
                    relax_comparisons(block, read_otherwise);
                }
            }
        }
    }
}

/// [`nested_blocks`](super::nested_blocks), to change them.
pub(super) fn nested_blocks_mut(ins: &mut Instruction) -> Vec<&mut Block> {
    match ins {
        Instruction::Loop(l) => vec![&mut l.condition, &mut l.body],
        Instruction::Branch(b) => {
            let clauses = b.clauses.iter_mut().flat_map(|(pred, body)| [pred, body]);
            clauses.chain(std::iter::once(&mut b.otherwise)).collect()
        }
        Instruction::Op(_) | Instruction::Fused(_) | Instruction::Compiled(_) => Vec::new(),
    }
}

/// Whether `call` can join a fused group (it may still run unfused, when
/// its inputs turn out not to be float32): an exactly rounded element-wise
/// op (crate::ops::computed::elementwise_kind), so fused or not, its bits
/// are MLX's.
pub(super) fn fusible(call: &OpCall) -> bool {
    crate::ops::computed::elementwise_kind(call.op).is_some()
        && call.results == 1
        && matches!(call.cast, None | Some(Dtype::Float32))
}

/// Element-wise fusion on the CPU (crate::elementwise_fusion): replaces, in
/// `block` and the blocks nested in it, every group of two or more fusible
/// ops joined by results read once (`reads[slot]`, counted over the whole
/// program) by one [`Instruction::Fused`] at its last op's place.
/// `when_ready`: groups that run fused only when their inputs are computed
/// ([`Program::group_ready_ops`]).
/// Returns how many groups it made.
pub(super) fn fuse_block(block: &mut Block, reads: &[u32], when_ready: bool) -> usize {
    let mut made = 0;
    for ins in &mut block.instructions {
        for nested in nested_blocks_mut(ins) {
            made += fuse_block(nested, reads, when_ready);
        }
    }
    // member_of[i]: the group instruction i belongs to, named by the index
    // of the group's last op (its root); members[root]: the group's ops;
    // root_writing[slot]: the open group whose root writes `slot`.
    let n = block.instructions.len();
    let mut member_of: Vec<Option<usize>> = vec![None; n];
    let mut root_writing: std::collections::HashMap<usize, usize> = Default::default();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        let Instruction::Op(call) = &block.instructions[i] else {
            continue;
        };
        if !fusible(call) {
            continue;
        }
        let mut group = vec![i];
        for s in &call.inputs {
            if reads.get(*s).copied() != Some(1) {
                continue;
            }
            if let Some(g) = root_writing.remove(s) {
                group.append(&mut members[g]);
            }
        }
        group.sort_unstable();
        for &m in &group {
            member_of[m] = Some(i);
        }
        members[i] = group;
        root_writing.insert(call.first(), i);
    }
    let mut kept = Vec::with_capacity(n);
    let mut taken: Vec<Option<Instruction>> = std::mem::take(&mut block.instructions)
        .into_iter()
        .map(Some)
        .collect();
    for i in 0..n {
        match member_of[i] {
            Some(root) if members[root].len() >= 2 => {
                if root == i {
                    let ops: Vec<OpCall> = members[root]
                        .iter()
                        .filter_map(|&m| match taken[m].take() {
                            Some(Instruction::Op(call)) => Some(call),
                            _ => None,
                        })
                        .collect();
                    // (ops the kernel cannot take stay as they were, in
                    // order: their inputs are written before the root)
                    match FusedOps::new(ops, when_ready) {
                        Ok(group) => {
                            kept.push(Instruction::Fused(group));
                            made += 1;
                        }
                        Err(ops) => kept.extend(ops.into_iter().map(Instruction::Op)),
                    }
                }
            }
            _ => {
                if let Some(ins) = taken[i].take() {
                    kept.push(ins);
                }
            }
        }
    }
    block.instructions = kept;
    made
}

/// MLX's compile for a program that is not straight-line, on a GPU
/// ([`Program::fuse`]): replaces, in `block` and the blocks nested in it,
/// every run of [`COMPILED_RUN`] or more consecutive ops (not ops that read
/// values while they are built, [`Op::reads_values`], nor ops whose bounds
/// the host may know, [`Op::bound_inputs`]: a cache's write at a loop's
/// position) by one
/// [`Instruction::Compiled`] whose function runs them (crate::fusion: where
/// MLX cannot trace them, they run one by one). `reads[slot]` counts the
/// slot's reads over the whole program, of `slots` slots. Returns how many
/// runs it made.
///
/// [`Program::fuse`]: super::Program::fuse
///
/// An op that computes a value such an op reads (`read_while_built`: an
/// attention's mask, from a loop's position and cached mask) stays out of
/// the runs too, so that the values the host knows stay known
/// (crate::host_tensor) and the mask needs no evaluation: it moves ahead
/// of the run being gathered when it reads nothing that run writes, and
/// ends the run otherwise.
pub(super) fn compile_runs(
    block: &mut Block,
    reads: &[u32],
    read_while_built: &[bool],
    slots: usize,
    device: Device,
) -> usize {
    let mut made = 0;
    for ins in &mut block.instructions {
        for nested in nested_blocks_mut(ins) {
            made += compile_runs(nested, reads, read_while_built, slots, device);
        }
    }
    let mut kept = Vec::with_capacity(block.instructions.len());
    let mut run: Vec<OpCall> = Vec::new();
    let flush = |run: &mut Vec<OpCall>, kept: &mut Vec<Instruction>, made: &mut usize| {
        if run.len() >= COMPILED_RUN {
            kept.push(Instruction::Compiled(compiled_run(
                std::mem::take(run),
                reads,
                slots,
                device,
            )));
            *made += 1;
        } else {
            kept.extend(run.drain(..).map(Instruction::Op));
        }
    };
    for ins in std::mem::take(&mut block.instructions) {
        match ins {
            Instruction::Op(call) if feeds_a_read(&call, read_while_built) => {
                let written_by_run = |s: &usize| {
                    run.iter()
                        .any(|r: &OpCall| (r.first..r.first + r.results).contains(s))
                };
                if call.inputs.iter().any(written_by_run) {
                    flush(&mut run, &mut kept, &mut made);
                }
                kept.push(Instruction::Op(call));
            }
            Instruction::Op(call)
                if !call.op.reads_values() && call.op.bound_inputs().is_empty() =>
            {
                run.push(call)
            }
            other => {
                flush(&mut run, &mut kept, &mut made);
                kept.push(other);
            }
        }
    }
    flush(&mut run, &mut kept, &mut made);
    block.instructions = kept;
    made
}

/// For each of a program's `slots` (its top-level block `main`), whether
/// the program reads its value while it builds the graph: an input whose
/// values an op reads ([`Op::reads_values`]) or whose known values give an
/// op constant bounds ([`Op::bound_inputs`]), a branch's predicate, or an
/// input of an op the host may compute (crate::host_tensor's
/// `may_compute`) or of a loop that computes such a slot. These are the
/// values [`compile_runs`] leaves out of MLX's compile. (Values through a
/// branch's results are not followed: they are compiled as any.)
pub(super) fn read_while_built(main: &Block, slots: usize) -> Vec<bool> {
    let mut marked = vec![false; slots];
    // (a loop's state feeds back into its body: passes run until one
    // marks nothing new)
    while mark_read_while_built(main, &mut marked) {}
    marked
}

/// One pass of [`read_while_built`] over `block`, last instruction first:
/// whether it marked a slot not marked before.
fn mark_read_while_built(block: &Block, marked: &mut [bool]) -> bool {
    let mut added = false;
    // (whether it marked `s` now)
    let mark = |s: usize, marked: &mut [bool]| match marked.get_mut(s) {
        Some(m) if !*m => {
            *m = true;
            true
        }
        _ => false,
    };
    let is_marked = |s: usize, marked: &[bool]| marked.get(s) == Some(&true);
    for ins in block.instructions.iter().rev() {
        match ins {
            Instruction::Op(call) => {
                for &k in call.op.value_inputs().iter().chain(call.op.bound_inputs()) {
                    if let Some(&s) = call.inputs.get(k) {
                        added |= mark(s, marked);
                    }
                }
                if feeds_a_read(call, marked) {
                    for &s in &call.inputs {
                        added |= mark(s, marked);
                    }
                }
            }
            Instruction::Loop(l) => {
                for k in 0..l.initial.len() {
                    let state = l.state + k;
                    if is_marked(l.results + k, marked) {
                        added |= mark(state, marked);
                    }
                    if is_marked(state, marked) {
                        added |= mark(l.initial[k], marked);
                        if let Some(&next) = l.body.outputs.get(k) {
                            added |= mark(next, marked);
                        }
                    }
                }
            }
            Instruction::Branch(b) => {
                for (pred, _) in &b.clauses {
                    if let Some(&p) = pred.outputs.first() {
                        added |= mark(p, marked);
                    }
                }
            }
            Instruction::Fused(_) | Instruction::Compiled(_) => {}
        }
        for nested in nested_blocks(ins).into_iter().rev() {
            added |= mark_read_while_built(nested, marked);
        }
    }
    added
}

/// Whether `call` is an op the host may compute (crate::host_tensor's
/// `may_compute`) with a result among `marked` ([`read_while_built`]).
fn feeds_a_read(call: &OpCall, marked: &[bool]) -> bool {
    crate::host_tensor::may_compute(call.op)
        && (call.first..call.first + call.results).any(|s| marked.get(s) == Some(&true))
}

/// `ops` as one compiled function: the slots they read and do not write
/// are its arguments, in order of first read; the slots they write that are
/// read elsewhere (more often than among `ops`) its results.
fn compiled_run(ops: Vec<OpCall>, reads: &[u32], slots: usize, device: Device) -> CompiledRun {
    let written: std::collections::HashSet<usize> = ops
        .iter()
        .flat_map(|c| c.first()..c.first() + c.results)
        .collect();
    let mut externals: Vec<usize> = Vec::new();
    let mut within = std::collections::HashMap::<usize, u32>::new();
    for call in &ops {
        for &s in &call.inputs {
            *within.entry(s).or_default() += 1;
            if !written.contains(&s) && !externals.contains(&s) {
                externals.push(s);
            }
        }
    }
    let outputs: Vec<usize> = ops
        .iter()
        .flat_map(|c| c.first()..c.first() + c.results)
        .filter(|s| reads.get(*s).copied().unwrap_or(0) > within.get(s).copied().unwrap_or(0))
        .collect();
    let instructions: Vec<Instruction> = ops.iter().cloned().map(Instruction::Op).collect();
    let (body_externals, body_outputs) = (externals.clone(), outputs.clone());
    let body = move |args: &[Array]| -> Result<Vec<Array>> {
        let mut run = Run::new(
            vec![None; slots],
            vec![None; slots],
            &|| false,
            false,
            false,
        );
        for (&s, a) in body_externals.iter().zip(args) {
            run.slots[s] = Some(a.clone());
        }
        run.block(&instructions)?;
        body_outputs.iter().map(|&s| run.read(s)).collect()
    };
    CompiledRun {
        ops,
        externals,
        outputs,
        function: Arc::new(FusedProgram::new(device, Arc::new(body))),
    }
}
