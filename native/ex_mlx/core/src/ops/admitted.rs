//! Which keys an attention gives MLX, from the values of the boolean mask
//! that says which keys each query is admitted to (the op table's
//! `attention_admitted`: docs/numerics.md, decision 0021).
//!
//! A key no query is admitted to adds `exp(min_finite − max) = 0` to every
//! softmax sum and nothing to any output, so the keys past the last
//! admitted one are left out; where every query is then admitted to every
//! key given, no mask is given either, and where the admitted keys are
//! MLX's causal pattern, MLX's causal mode is. Both are exact: the result
//! is the same softmax-weighted sum, computed by the kernel MLX picks for
//! the operands given (a decoding step's one query over the written
//! positions without a mask, as mlx-lm gives it). A query admitted to no
//! key at all keeps the whole mask: its weights are then uniform over every
//! key (each score the type's smallest finite value), as the formula says.

/// The mask MLX is given over the keys kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// Every query is admitted to every key kept: no mask.
    All,
    /// Query `i` of `t_q` is admitted to the keys `0..=kept - t_q + i`
    /// (MLX's causal mode, aligned to the last key).
    Causal,
    /// The admitted values over the keys kept, in the mask's own shape
    /// with its last axis `kept` long (when it was the keys' axis).
    Mask(Vec<bool>, Vec<i32>),
}

/// What an attention gives MLX: its first `kept` keys and values, under
/// `form`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kept: usize,
    pub form: Form,
}

/// The plan for an attention of `queries` query rows over `keys` keys, the
/// mask `admitted` (row-major values of `shape`, which broadcasts to
/// `{b, h, queries, keys}`; checked by the caller). `None` where some query
/// is admitted to no key: the whole mask is given then.
pub fn plan(admitted: &[bool], shape: &[i32], queries: usize, keys: usize) -> Option<Plan> {
    // (the mask's shape with ones in front, to rank 4)
    let mut four = [1usize; 4];
    for (k, &d) in shape.iter().rev().take(4).enumerate() {
        four[3 - k] = d.max(0) as usize;
    }
    let (mask_queries, mask_keys) = (four[2], four[3]);
    let rows = four[..3].iter().product::<usize>();
    if rows * mask_keys != admitted.len() || rows == 0 || mask_keys == 0 {
        return None;
    }
    let row = |r: usize| &admitted[r * mask_keys..(r + 1) * mask_keys];
    // the last key any query is admitted to; none for some row: no plan
    let mut kept = 0;
    for r in 0..rows {
        let last = row(r).iter().rposition(|&a| a)?;
        kept = kept.max(last + 1);
    }
    if mask_keys == 1 {
        // (every row admitted to its one broadcast key: to every key)
        return Some(Plan {
            kept: keys,
            form: Form::All,
        });
    }
    if (0..rows).all(|r| row(r)[..kept].iter().all(|&a| a)) {
        return Some(Plan {
            kept,
            form: Form::All,
        });
    }
    let causal = mask_queries == queries
        && queries <= kept
        && (0..rows).all(|r| {
            let i = r % mask_queries;
            row(r)[..kept]
                .iter()
                .enumerate()
                .all(|(k, &a)| a == (k + queries <= kept + i))
        });
    if causal {
        return Some(Plan {
            kept,
            form: Form::Causal,
        });
    }
    let values = (0..rows)
        .flat_map(|r| row(r)[..kept].iter().copied())
        .collect();
    let mut kept_shape = shape.to_vec();
    if let Some(last) = kept_shape.last_mut() {
        *last = kept as i32;
    }
    Some(Plan {
        kept,
        form: Form::Mask(values, kept_shape),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f(q, k)` for `q` in `0..queries`, `k` in `0..keys`, row-major.
    fn grid(queries: usize, keys: usize, f: impl Fn(usize, usize) -> bool) -> Vec<bool> {
        (0..queries)
            .flat_map(|q| (0..keys).map(move |k| (q, k)))
            .map(|(q, k)| f(q, k))
            .collect()
    }

    #[test]
    fn a_decoding_step_keeps_the_written_keys_without_a_mask() {
        // one query at position 37 of a 160-key cache: keys 0..=37 written
        let mask = grid(1, 160, |_, k| k <= 37);
        assert_eq!(
            plan(&mask, &[1, 1, 1, 160], 1, 160),
            Some(Plan {
                kept: 38,
                form: Form::All
            })
        );
    }

    #[test]
    fn a_prompt_under_the_causal_mask_keeps_its_keys_in_causal_mode() {
        // 5 queries at positions 0..5 of an 8-key cache
        let mask = grid(5, 8, |q, k| k <= q);
        assert_eq!(
            plan(&mask, &[1, 1, 5, 8], 5, 8),
            Some(Plan {
                kept: 5,
                form: Form::Causal
            })
        );
        // three queries after two cached keys: query i sees keys 0..=2 + i
        let mask = grid(3, 8, |q, k| k <= 2 + q);
        assert_eq!(
            plan(&mask, &[3, 8], 3, 8).map(|p| p.form),
            Some(Form::Causal)
        );
    }

    #[test]
    fn a_padded_prompt_keeps_its_mask_over_the_kept_keys() {
        // key 0 is padding: no query is admitted to it
        let mask = grid(3, 6, |q, k| k >= 1 && k <= q + 1);
        let p = plan(&mask, &[1, 1, 3, 6], 3, 6).expect("a plan");
        assert_eq!(p.kept, 4);
        assert_eq!(
            p.form,
            Form::Mask(grid(3, 4, |q, k| k >= 1 && k <= q + 1), vec![1, 1, 3, 4])
        );
    }

    #[test]
    fn rows_of_a_batch_keep_the_keys_of_the_longest() {
        // two batch entries, one query each: 3 and 5 keys admitted
        let mut mask = grid(1, 8, |_, k| k < 3);
        mask.extend(grid(1, 8, |_, k| k < 5));
        let p = plan(&mask, &[2, 1, 1, 8], 1, 8).expect("a plan");
        assert_eq!(p.kept, 5);
        let mut kept = grid(1, 5, |_, k| k < 3);
        kept.extend(vec![true; 5]);
        assert_eq!(p.form, Form::Mask(kept, vec![2, 1, 1, 5]));
    }

    #[test]
    fn a_query_admitted_to_no_key_keeps_the_whole_mask() {
        let mask = grid(2, 4, |q, k| q == 1 && k < 2);
        assert_eq!(plan(&mask, &[2, 4], 2, 4), None);
    }

    #[test]
    fn a_mask_broadcast_over_the_keys_admits_all_or_none() {
        assert_eq!(
            plan(&[true, true], &[2, 1], 2, 9),
            Some(Plan {
                kept: 9,
                form: Form::All
            })
        );
        assert_eq!(plan(&[true, false], &[2, 1], 2, 9), None);
    }

    #[test]
    fn a_mask_of_one_query_row_for_several_queries_is_not_causal() {
        // the same row for 3 queries: a mask over the kept keys
        let mask = grid(1, 6, |_, k| k != 1 && k < 4);
        let p = plan(&mask, &[1, 6], 3, 6).expect("a plan");
        assert_eq!(p.kept, 4);
        assert_eq!(
            p.form,
            Form::Mask(vec![true, false, true, true], vec![1, 4])
        );
    }
}
