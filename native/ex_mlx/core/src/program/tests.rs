//! Tests of programs: checking, running, passes (fusion: fusion_tests.rs).

mod programs {
    use super::super::*;
    use crate::device::Device;
    use crate::worker::run_blocking;

    fn op(op: Op, inputs: &[usize], params: Vec<Param>, cast: Option<Dtype>) -> Instruction {
        Instruction::Op(OpCall::new(
            op,
            inputs.to_vec(),
            params,
            cast,
            op.results().len(),
        ))
    }

    fn block(instructions: Vec<Instruction>, outputs: &[usize]) -> Block {
        Block {
            instructions,
            outputs: outputs.to_vec(),
        }
    }

    fn sum_all() -> Vec<Param> {
        vec![Param::OptInts(None), Param::Bool(false)]
    }

    fn run_i32(program: Program, inputs: Vec<Vec<i32>>, constants: Vec<i32>) -> Vec<Vec<i32>> {
        run_blocking(Device::Cpu, move || {
            let inputs = inputs
                .iter()
                .map(|v| Array::from_slice(v, &[v.len() as i32]))
                .collect();
            let constants = constants.iter().map(|&c| Array::from_int(c)).collect();
            let out = program.run(inputs, constants)?;
            Ok(out.iter().map(|a| a.as_slice::<i32>().to_vec()).collect())
        })
        .unwrap()
    }

    #[test]
    fn runs_instructions_over_slots() {
        // out = sum((x + c) * x) as f32, and x + c: slots 0 (x), 1 (c), 2, 3, 4
        let program = Program::new(
            1,
            1,
            vec![
                op(Op::add, &[0, 1], vec![], None),
                op(Op::multiply, &[2, 0], vec![], None),
                op(Op::sum, &[3], sum_all(), Some(Dtype::Float32)),
            ],
            vec![4, 2],
        )
        .unwrap();
        let (sum, plus) = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[1i32, 2, 3], &[3]);
            let c = Array::from_int(10);
            let out = program.run(vec![x], vec![c])?;
            Ok((
                out[0].as_slice::<f32>().to_vec(),
                out[1].as_slice::<i32>().to_vec(),
            ))
        })
        .unwrap();
        // (1+10)*1 + (2+10)*2 + (3+10)*3 = 11 + 24 + 39
        assert_eq!(sum, vec![74.0]);
        assert_eq!(plus, vec![11, 12, 13]);
    }

    fn count_ops(block: &Block) -> usize {
        block
            .instructions
            .iter()
            .filter(|i| matches!(i, Instruction::Op(_)))
            .count()
    }

    /// The ops in the body of the program's first top-level loop.
    fn loop_body_ops(program: &Program) -> Option<usize> {
        program.main.instructions.iter().find_map(|i| match i {
            Instruction::Loop(l) => Some(count_ops(&l.body)),
            _ => None,
        })
    }

    #[test]
    fn rearrangements_of_rearrangements_fold_into_one() {
        // x (slot 0) is {2, 3, 4}, its values 0..24; 1 = reshape(x, {6, 4}),
        // 2 = reshape(1, {4, 6}) (both cast to int32, as Nx's types ask);
        // 3 = transpose(x, [1, 2, 0]) ({3, 4, 2}), 4 = transpose(3, [0, 2, 1])
        // ({3, 2, 4}); 5 = transpose(x, [2, 1, 0]) is read twice
        // (6 = transpose(5, [2, 1, 0]) and an output): kept; 7 = reshape(x)
        // cast to uint8, 8 = reshape(7) cast to int32: kept (two casts)
        let shape = |s: &[i32]| vec![Param::Shape(s.to_vec())];
        let axes = |a: &[i64]| vec![Param::OptInts(Some(a.to_vec()))];
        let (s32, u8) = (Some(Dtype::Int32), Some(Dtype::Uint8));
        let program = Program::new(
            1,
            0,
            vec![
                op(Op::reshape, &[0], shape(&[6, 4]), s32),
                op(Op::reshape, &[1], shape(&[4, 6]), None),
                op(Op::transpose, &[0], axes(&[1, 2, 0]), None),
                op(Op::transpose, &[3], axes(&[0, 2, 1]), None),
                op(Op::transpose, &[0], axes(&[2, 1, 0]), None),
                op(Op::transpose, &[5], axes(&[2, 1, 0]), None),
                op(Op::reshape, &[0], shape(&[24]), u8),
                op(Op::reshape, &[7], shape(&[4, 6]), s32),
            ],
            vec![2, 4, 6, 5, 8],
        )
        .unwrap();
        assert_eq!(count_ops(&program.main), 6);
        let first = program.main.instructions.iter().find_map(|i| match i {
            Instruction::Op(call) if call.op == Op::reshape => {
                Some((call.inputs.clone(), call.cast))
            }
            _ => None,
        });
        assert_eq!(first, Some((vec![0], s32)));
        let out = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&(0..24).collect::<Vec<i32>>(), &[2, 3, 4]);
            let out = program.run(vec![x], vec![])?;
            out.iter()
                .map(|a| {
                    let a = crate::ops::shape::contiguous(a)?;
                    Ok((a.shape().to_vec(), a.as_slice::<i32>().to_vec()))
                })
                .collect::<Result<Vec<_>>>()
        })
        .unwrap();
        // x[i][j][k] = 12i + 4j + k
        let x = |i: i32, j: i32, k: i32| 12 * i + 4 * j + k;
        assert_eq!(out[0], (vec![4, 6], (0..24).collect()));
        // slot 4 at [a][b][c] is x[b][a][c] (axes [1, 0, 2] of x)
        let mut expected = vec![];
        for a in 0..3 {
            for b in 0..2 {
                for c in 0..4 {
                    expected.push(x(b, a, c));
                }
            }
        }
        assert_eq!(out[1], (vec![3, 2, 4], expected));
        // transposing twice by [2, 1, 0] gives x back
        assert_eq!(out[2], (vec![2, 3, 4], (0..24).collect()));
        assert_eq!(out[3].0, vec![4, 3, 2]);
        // through uint8 and back: 0..24 fit, so the values are x's
        assert_eq!(out[4], (vec![4, 6], (0..24).collect()));
    }

    #[test]
    fn equal_ops_merge_into_the_first() {
        // slots 0 (x), 1 (c = 10), 2 (limit = 100); 3 = x + c, 4 = x + c
        // (merged into 3), 5 = -3, 6 = -4 (merged into 5 once 4 is 3),
        // 7 = 5 · 6; a loop from 4 (state 8) while sum(8) (9) < limit (10):
        // 11 = 8 + 4, 12 = 8 + 3 (merged: 4 is 3), 13 = max(11, 12); its
        // result 14; 15 = c + x, the inputs in another order: kept
        let condition = block(
            vec![
                op(Op::sum, &[8], sum_all(), None),
                op(Op::less, &[9, 2], vec![], None),
            ],
            &[10],
        );
        let body = block(
            vec![
                op(Op::add, &[8, 4], vec![], None),
                op(Op::add, &[8, 3], vec![], None),
                op(Op::max, &[11, 12], vec![], None),
            ],
            &[13],
        );
        let program = Program::new(
            1,
            2,
            vec![
                op(Op::add, &[0, 1], vec![], None),
                op(Op::add, &[0, 1], vec![], None),
                op(Op::negate, &[3], vec![], None),
                op(Op::negate, &[4], vec![], None),
                op(Op::multiply, &[5, 6], vec![], None),
                Instruction::Loop(Loop::new(vec![4], condition, body)),
                op(Op::add, &[1, 0], vec![], None),
            ],
            vec![7, 6, 14, 4, 15],
        )
        .unwrap();
        assert_eq!(count_ops(&program.main), 4);
        let body_ops = loop_body_ops(&program);
        assert_eq!(body_ops, Some(2));
        let out = run_i32(program, vec![vec![1, 2, 3]], vec![10, 100]);
        assert_eq!(out[0], vec![121, 144, 169]);
        assert_eq!(out[1], vec![-11, -12, -13]);
        // [11, 12, 13] (sum 36), + itself: 72, then 108
        assert_eq!(out[2], vec![33, 36, 39]);
        assert_eq!(out[3], vec![11, 12, 13]);
        assert_eq!(out[4], vec![11, 12, 13]);
    }

    #[test]
    fn ops_nothing_reads_are_dropped() {
        // slots 0 (x), 1 (c = 2), 2 (limit = 100); 3 = x · c; 4 = -3 and
        // 5 = 4 + c, read by nothing (5 dropped, then 4); a loop from 3
        // (state 6) while sum(6) (7) < limit (8): 9 = 6 · c, 10 = -9 and
        // 11 = 10 - 10, read by nothing; its result 12; 13 = -12, unread
        let program = Program::new(
            1,
            2,
            vec![
                op(Op::multiply, &[0, 1], vec![], None),
                op(Op::negate, &[3], vec![], None),
                op(Op::add, &[4, 1], vec![], None),
                Instruction::Loop(Loop::new(
                    vec![3],
                    block(
                        vec![
                            op(Op::sum, &[6], sum_all(), None),
                            op(Op::less, &[7, 2], vec![], None),
                        ],
                        &[8],
                    ),
                    block(
                        vec![
                            op(Op::multiply, &[6, 1], vec![], None),
                            op(Op::negate, &[9], vec![], None),
                            op(Op::subtract, &[10, 10], vec![], None),
                        ],
                        &[9],
                    ),
                )),
                op(Op::negate, &[12], vec![], None),
            ],
            vec![12],
        )
        .unwrap();
        assert_eq!(count_ops(&program.main), 1);
        let body_ops = loop_body_ops(&program);
        assert_eq!(body_ops, Some(1));
        // [2, 4, 6] doubled while its sum is below 100: 12, 24, 48, 96
        let out = run_i32(program, vec![vec![1, 2, 3]], vec![2, 100]);
        assert_eq!(out, vec![vec![32, 64, 96]]);
    }

    // slots 0 (x), 1 (0), 2 (10), 3 (-10); 4 = x > 0 and 5 = x < 0 (u8),
    // 6 = select(4, 10, -10), 7 = select(5, 10, -10)
    fn signs(outputs: &[usize]) -> Program {
        let u8 = Some(Dtype::Uint8);
        Program::new(
            1,
            3,
            vec![
                op(Op::greater, &[0, 1], vec![], u8),
                op(Op::less, &[0, 1], vec![], u8),
                op(Op::select, &[4, 2, 3], vec![], None),
                op(Op::select, &[5, 2, 3], vec![], None),
            ],
            outputs.to_vec(),
        )
        .unwrap()
    }

    fn casts(program: &Program) -> Vec<Option<Dtype>> {
        program
            .main
            .instructions
            .iter()
            .map(|ins| match ins {
                Instruction::Op(call) => call.cast,
                _ => unreachable!("straight-line program"),
            })
            .collect()
    }

    #[test]
    fn comparisons_read_only_by_select_stay_boolean() {
        let only_selects = signs(&[6, 7]);
        let u8 = Some(Dtype::Uint8);
        assert_eq!(casts(&only_selects), vec![None, None, None, None]);
        // x < 0 is an output too: it keeps its u8
        let also_output = signs(&[6, 7, 5]);
        assert_eq!(casts(&also_output), vec![None, u8, None, None]);
        let out = run_i32(signs(&[6, 7]), vec![vec![-2, 0, 3]], vec![0, 10, -10]);
        assert_eq!(out, vec![vec![-10, -10, 10], vec![10, -10, -10]]);
        let flags = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[-2i32, 0, 3], &[3]);
            let constants = vec![
                Array::from_int(0),
                Array::from_int(10),
                Array::from_int(-10),
            ];
            let out = also_output.run(vec![x], constants)?;
            Ok((out[2].dtype(), out[2].as_slice::<u8>().to_vec()))
        })
        .unwrap();
        assert_eq!(flags, (Dtype::Uint8, vec![1, 0, 0]));
    }

    // slots 0 (x), 1 (0), 2 (5), 3 (10), 4 (-10); 5 = x > 0 and 6 = x < 5
    // (u8), 7 = 5 and 6 (u8), 8 = select(7, 10, -10)
    fn within(outputs: &[usize]) -> Program {
        let u8 = Some(Dtype::Uint8);
        Program::new(
            1,
            4,
            vec![
                op(Op::greater, &[0, 1], vec![], u8),
                op(Op::less, &[0, 2], vec![], u8),
                op(Op::logical_and, &[5, 6], vec![], u8),
                op(Op::select, &[7, 3, 4], vec![], None),
            ],
            outputs.to_vec(),
        )
        .unwrap()
    }

    #[test]
    fn booleans_read_only_as_booleans_stay_boolean_through_logical_ops() {
        let u8 = Some(Dtype::Uint8);
        // the comparisons are read by the logical op, whose result is read
        // by select alone: no casts
        assert_eq!(casts(&within(&[8])), vec![None, None, None, None]);
        // the logical op's result is an output too: it keeps its u8, its
        // operands need none
        let also_output = within(&[8, 7]);
        assert_eq!(casts(&also_output), vec![None, None, u8, None]);
        let out = run_i32(within(&[8]), vec![vec![-2, 3, 7]], vec![0, 5, 10, -10]);
        assert_eq!(out, vec![vec![-10, 10, -10]]);
        let flags = run_blocking(Device::Cpu, move || {
            let x = Array::from_slice(&[-2i32, 3, 7], &[3]);
            let constants = [0, 5, 10, -10].map(Array::from_int).to_vec();
            let out = also_output.run(vec![x], constants)?;
            Ok((out[1].dtype(), out[1].as_slice::<u8>().to_vec()))
        })
        .unwrap();
        assert_eq!(flags, (Dtype::Uint8, vec![0, 1, 0]));
    }

    // while i < 10 { i += 1; acc *= 2 }: slots 0 (i), 1 (acc), 2 (10),
    // 3 (1), 4 (2); state 5, 6; condition 7; body 8, 9; results 10, 11.
    fn doubling_loop() -> Program {
        Program::new(
            2,
            3,
            vec![Instruction::Loop(Loop::new(
                vec![0, 1],
                block(vec![op(Op::less, &[5, 2], vec![], None)], &[7]),
                block(
                    vec![
                        op(Op::add, &[5, 3], vec![], None),
                        op(Op::multiply, &[6, 4], vec![], None),
                    ],
                    &[8, 9],
                ),
            ))],
            vec![10, 11],
        )
        .unwrap()
    }

    #[test]
    fn loops_run_until_their_condition_is_false() {
        let out = run_i32(doubling_loop(), vec![vec![3], vec![1, 5]], vec![10, 1, 2]);
        // 7 steps from 3 to 10; acc doubled 7 times
        assert_eq!(out, vec![vec![10], vec![128, 640]]);
        // a condition false at once: the initial state comes back
        let out = run_i32(doubling_loop(), vec![vec![12], vec![1, 5]], vec![10, 1, 2]);
        assert_eq!(out, vec![vec![12], vec![1, 5]]);
    }

    #[test]
    fn a_stopped_run_ends_with_cancelled() {
        let program = doubling_loop();
        assert!(program.loops());
        assert!(!three_way().loops());
        let e = run_blocking(Device::Cpu, move || {
            let inputs = vec![Array::from_int(0), Array::from_int(1)];
            let constants = vec![Array::from_int(10), Array::from_int(1), Array::from_int(2)];
            program.run_until(inputs, constants, &|| true)
        })
        .unwrap_err();
        assert_eq!(e.kind(), "cancelled");
    }

    // cond x > 0 -> x * 2; x < -5 -> -x; true -> x + 1 (as integers):
    // slots 0 (x), 1 (0), 2 (2), 3 (-5), 4 (1); clause 0: 5, 6; clause 1:
    // 7, 8; last: 9; result 10; then 11 = result + x.
    fn three_way() -> Program {
        Program::new(
            1,
            4,
            vec![
                Instruction::Branch(Branch::new(
                    vec![
                        (
                            block(vec![op(Op::greater, &[0, 1], vec![], None)], &[5]),
                            block(vec![op(Op::multiply, &[0, 2], vec![], None)], &[6]),
                        ),
                        (
                            block(vec![op(Op::less, &[0, 3], vec![], None)], &[7]),
                            block(vec![op(Op::negate, &[0], vec![], None)], &[8]),
                        ),
                    ],
                    block(vec![op(Op::add, &[0, 4], vec![], None)], &[9]),
                )),
                op(Op::add, &[10, 0], vec![], None),
            ],
            vec![10, 11],
        )
        .unwrap()
    }

    #[test]
    fn branches_run_the_first_true_clause() {
        for (x, expected) in [(4, 8), (-9, 9), (-2, -1), (0, 1)] {
            let out = run_i32(three_way(), vec![vec![x]], vec![0, 2, -5, 1]);
            assert_eq!(out, vec![vec![expected], vec![expected + x]], "x = {x}");
        }
    }

    #[test]
    fn malformed_programs_are_refused_with_the_reason() {
        let e = Program::new(1, 0, vec![op(Op::add, &[0, 1], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program: instruction 0 (add): reads slot 1, which is not written before it"
        );
        let e = Program::new(1, 0, vec![op(Op::add, &[0], vec![], None)], vec![1]).unwrap_err();
        assert_eq!(e.to_string(), "program: instruction 0 (add): 1 inputs");
        let e = Program::new(1, 0, vec![op(Op::sum, &[0], vec![], None)], vec![1]).unwrap_err();
        assert!(e.to_string().contains("parameters"), "{e}");
        let e = Program::new(1, 0, vec![], vec![3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "program: outputs: reads slot 3, which is not written before it"
        );
    }

    #[test]
    fn what_a_block_writes_is_not_visible_after_it() {
        // the loop's state (slot 1) and body (slot 3) read after the loop
        let looped = |outputs: &[usize]| {
            Program::new(
                1,
                0,
                vec![Instruction::Loop(Loop::new(
                    vec![0],
                    block(vec![], &[1]),
                    block(vec![op(Op::negate, &[1], vec![], None)], &[2]),
                ))],
                outputs.to_vec(),
            )
        };
        assert!(looped(&[3]).is_ok());
        for slot in [1, 2] {
            let e = looped(&[slot]).unwrap_err().to_string();
            assert!(e.contains(&format!("reads slot {slot}")), "{e}");
        }
        // a clause's slots are not visible to the next clause
        let e = Program::new(
            1,
            0,
            vec![Instruction::Branch(Branch::new(
                vec![(
                    block(vec![op(Op::negate, &[0], vec![], None)], &[1]),
                    block(vec![], &[1]),
                )],
                block(vec![], &[1]),
            ))],
            vec![2],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("last clause: outputs: reads slot 1"), "{e}");
        // loops give the outputs they must
        let e = Program::new(
            1,
            0,
            vec![Instruction::Loop(Loop::new(
                vec![0],
                block(vec![], &[1]),
                block(vec![], &[1, 1]),
            ))],
            vec![2],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("body: gives 2 outputs, 1 expected"), "{e}");
    }

    #[test]
    fn nesting_is_bounded() {
        let mut body = block(vec![], &[1]);
        for _ in 0..=MAX_DEPTH {
            body = block(vec![Instruction::Branch(Branch::new(vec![], body))], &[]);
        }
        let e = Program::new(1, 0, body.instructions, vec![]).unwrap_err();
        assert!(e.to_string().contains("nest deeper than 64"), "{e}");
    }
}
