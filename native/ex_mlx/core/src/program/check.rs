//! Checking a program given from outside: every slot read is visible
//! where it is read, blocks give as many outputs as their place needs,
//! nesting is bounded; errors name the place.

use super::{Block, Instruction, MAX_DEPTH};
use crate::error::{Error, Result};

/// Which slots are visible while a program is checked.
pub(super) struct Scope {
    pub(super) visible: Vec<bool>,
}

impl Scope {
    pub(super) fn next(&self) -> usize {
        self.visible.len()
    }

    fn define(&mut self, n: usize) -> usize {
        let first = self.next();
        self.visible.resize(first + n, true);
        first
    }

    fn hide_from(&mut self, first: usize) {
        for v in &mut self.visible[first..] {
            *v = false;
        }
    }

    fn readable(&self, slot: usize) -> bool {
        self.visible.get(slot).copied().unwrap_or(false)
    }
}

pub(super) fn malformed(place: &str, message: impl std::fmt::Display) -> Error {
    Error::arg("program", format!("{place}: {message}"))
}

/// `what` inside `place` ("" being the program's main block).
pub(super) fn within(place: &str, what: impl std::fmt::Display) -> String {
    if place.is_empty() {
        what.to_string()
    } else {
        format!("{place}: {what}")
    }
}

pub(super) fn check_block(
    block: &mut Block,
    scope: &mut Scope,
    place: &str,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(Error::arg(
            "program",
            within(
                place,
                format!("loops and branches nest deeper than {MAX_DEPTH}"),
            ),
        ));
    }
    for (i, ins) in block.instructions.iter_mut().enumerate() {
        match ins {
            Instruction::Op(call) => {
                // (the place is named only in an error: a program of
                // thousands of ops is checked at every compile)
                let place = || within(place, format!("instruction {i} ({})", call.op.name()));
                check_reads(&call.inputs, scope, place)?;
                if !call.op.takes_inputs(call.inputs.len()) {
                    return Err(malformed(&place(), format!("{} inputs", call.inputs.len())));
                }
                if !call.op.takes_params(&call.params) {
                    return Err(malformed(
                        &place(),
                        "parameters of the wrong number or kinds",
                    ));
                }
                if call.results != call.op.results().len() {
                    return Err(malformed(
                        &place(),
                        format!(
                            "{} results declared, the op has {}",
                            call.results,
                            call.op.results().len()
                        ),
                    ));
                }
                call.first = scope.define(call.results);
            }
            Instruction::Fused(_) | Instruction::Compiled(_) => {
                return Err(malformed(
                    &within(place, format!("instruction {i}")),
                    "fused groups are made by ExMLX, not given",
                ))
            }
            Instruction::Loop(l) => {
                let place = within(place, format!("instruction {i} (while)"));
                check_reads(&l.initial, scope, || place.clone())?;
                let n = l.initial.len();
                l.state = scope.define(n);
                check_block(
                    &mut l.condition,
                    scope,
                    &format!("{place} condition"),
                    depth + 1,
                )?;
                check_outputs(&l.condition, 1, &format!("{place} condition"))?;
                check_block(&mut l.body, scope, &format!("{place} body"), depth + 1)?;
                check_outputs(&l.body, n, &format!("{place} body"))?;
                scope.hide_from(l.state);
                l.results = scope.define(n);
            }
            Instruction::Branch(b) => {
                let place = within(place, format!("instruction {i} (cond)"));
                let n = b.otherwise.outputs.len();
                let first = scope.next();
                for (k, (pred, body)) in b.clauses.iter_mut().enumerate() {
                    let start = scope.next();
                    let here = format!("{place} clause {k}");
                    check_block(pred, scope, &format!("{here} predicate"), depth + 1)?;
                    check_outputs(pred, 1, &format!("{here} predicate"))?;
                    check_block(body, scope, &here, depth + 1)?;
                    check_outputs(body, n, &here)?;
                    scope.hide_from(start);
                }
                let start = scope.next();
                check_block(
                    &mut b.otherwise,
                    scope,
                    &format!("{place} last clause"),
                    depth + 1,
                )?;
                scope.hide_from(start);
                b.inner = first..scope.next();
                scope.define(n);
            }
        }
    }
    check_reads(&block.outputs, scope, || within(place, "outputs"))
}

/// Checks that `slots` are readable; `place` names where, for the error.
pub(super) fn check_reads(
    slots: &[usize],
    scope: &Scope,
    place: impl FnOnce() -> String,
) -> Result<()> {
    match slots.iter().find(|&&s| !scope.readable(s)) {
        Some(slot) => Err(malformed(
            &place(),
            format!("reads slot {slot}, which is not written before it"),
        )),
        None => Ok(()),
    }
}

pub(super) fn check_outputs(block: &Block, n: usize, place: &str) -> Result<()> {
    if block.outputs.len() == n {
        Ok(())
    } else {
        Err(malformed(
            place,
            format!("gives {} outputs, {n} expected", block.outputs.len()),
        ))
    }
}
