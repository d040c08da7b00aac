if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Compiler.FusedKernels do
    @moduledoc false
    # The composed forms of RMS normalization and softmax in an
    # `Nx.Defn.Expr` graph, which ExMLX.Compiler with `fuse: true` records
    # as MLX's fused kernels (the op table's `rms_norm` and `softmax`)
    # instead of their five to nine ops (docs/numerics.md says how the
    # results differ). The forms are those Nx gives the usual definitions
    # (Bumblebee's `rms_norm` layers, Axon's `softmax` activation):
    #
    #   * RMS normalization: `normalized * w`, `normalized` being
    #     `x * rsqrt(mean(x ** 2, last axis, keep) + eps)`, either in `x`'s
    #     type or computed on `as_type(x, :f32)` and cast back to `x`'s type;
    #     `w` of shape `{d}` (`x`'s last dimension), `x`, `w` and the result
    #     of one floating type;
    #   * softmax: `e * (1 / sum(e, axes, keep))` or `e / sum(e, axes, keep)`,
    #     `e` being `exp(x - reduce_max(x, axes, keep))` (the maximum possibly
    #     under `stop_grad`), `x` and the result of one floating type.
    #   * attention: `dot(p, [3], [0, 1], v, [2], [0, 1])`, `p` being the
    #     softmax above over axis 3 (under Axon's layer metadata or not) of
    #     `dot(q, [3], [0, 1], k, [3], [0, 1]) * scale + mask`: Bumblebee's
    #     attention weights and output, `q`, `k`, `v` of rank 4
    #     (`{batch, heads, sequence, depth}`), `scale` a constant, `mask` (any
    #     additive bias: Bumblebee's `select(mask, 0, min_finite)`) of rank 4
    #     or less broadcasting to the scores, all of one floating type.
    #   * rotary embedding at one position per batch entry (a decoding
    #     step): `x * c + concatenate([-x2, x1], last axis) * s`, `x` of shape
    #     `{batch, 1, heads, d}` and `x1`, `x2` its two halves along the last
    #     axis; `c` and `s` (possibly cast to `x`'s type) the rows `idx`
    #     (`{batch, 1}`, integers) of `cos(t)` and `sin(t)` given a new axis
    #     2, `t` being `concatenate([a, a], last axis)` and `a` the outer
    #     product of `iota({n})` and a float32 vector `f` of `d / 2`
    #     frequencies (Bumblebee's `apply_rotary_embedding`; row `p` of `t` is
    #     `p · f` twice). The result is MLX's `rope` of `x` at the positions
    #     `idx`, with the periods `1 / f`.
    #
    # The operands of `add` and `multiply` are matched in either order (Nx
    # puts constants first). Any other form is left to the ops it is made of.

    alias Nx.Defn.Expr
    alias Nx.Tensor, as: T

    @doc """
    What `expr` (a `multiply`, `divide`, `dot` or `add` node) computes, if
    one of the forms above: `{:rms_norm, x, w, eps}`, `{:softmax, x, axes}`,
    `{:attention, q, k, v, mask, scale}` or `{:rope, x, idx, f}` (the
    tensors expressions); `nil` otherwise.
    """
    def match(%T{data: %Expr{op: :multiply, args: [a, b]}} = expr) do
      rms_norm(expr, a, b) || rms_norm(expr, b, a) || softmax_product(expr, a, b) ||
        softmax_product(expr, b, a)
    end

    def match(%T{data: %Expr{op: :divide, args: [e, total]}} = expr),
      do: softmax(expr, e, total)

    def match(%T{data: %Expr{op: :dot, args: [p, [3], [0, 1], v, [2], [0, 1]]}} = expr),
      do: attention(expr, without_metadata(p), v)

    def match(%T{data: %Expr{op: :add, args: [a, b]}} = expr),
      do: rope(expr, a, b) || rope(expr, b, a)

    def match(_expr), do: nil

    # ---------------------------------------------------------------------
    # RMS normalization
    # ---------------------------------------------------------------------

    defp rms_norm(%T{type: type} = expr, normalized, %T{type: type, shape: {d}} = w) do
      with {:ok, %T{type: ^type, shape: shape} = x, eps} <- normalized(normalized),
           true <-
             floating?(type) and elem(shape, tuple_size(shape) - 1) == d and expr.shape == shape do
        {:rms_norm, x, w, eps}
      else
        _ -> nil
      end
    end

    defp rms_norm(_expr, _normalized, _w), do: nil

    # `x * rsqrt(mean(x ** 2) + eps)`: `{:ok, x, eps}`, `x` being the input
    # before an upcast to float32 that is cast back
    defp normalized(%T{data: %Expr{op: :as_type, args: [inner]}, type: type}) do
      with {:ok, %T{data: %Expr{op: :as_type, args: [x]}, type: {:f, 32}}, eps} <- scaled(inner),
           %T{type: ^type} <- x do
        {:ok, x, eps}
      else
        _ -> nil
      end
    end

    defp normalized(expr), do: scaled(expr)

    defp scaled(%T{data: %Expr{op: :multiply, args: [a, b]}}),
      do: scaled(a, b) || scaled(b, a)

    defp scaled(_expr), do: nil

    defp scaled(x, %T{data: %Expr{op: :rsqrt, args: [variance]}}) do
      case variance do
        %T{data: %Expr{op: :add, args: [p, q]}} ->
          mean_square_plus_eps(x, p, q) || mean_square_plus_eps(x, q, p)

        _ ->
          nil
      end
    end

    defp scaled(_x, _other), do: nil

    defp mean_square_plus_eps(x, eps, mean) do
      with eps when is_float(eps) or is_integer(eps) <- constant(eps),
           %T{data: %Expr{op: :divide, args: [total, n]}} <- mean,
           %T{data: %Expr{op: :sum, args: [square, opts]}} <- total,
           %T{data: %Expr{op: :pow, args: [base, two]}} <- square,
           true <- same?(base, x) and constant(two) == 2,
           last = tuple_size(x.shape) - 1,
           true <- last >= 0 and opts[:axes] == [last] and opts[:keep_axes] == true,
           true <- constant(n) == elem(x.shape, last) do
        {:ok, x, eps * 1.0}
      else
        _ -> nil
      end
    end

    # ---------------------------------------------------------------------
    # Softmax
    # ---------------------------------------------------------------------

    # e * (1 / sum(e))
    defp softmax_product(expr, e, %T{data: %Expr{op: :divide, args: [one, total]}}) do
      if constant(one) == 1, do: softmax(expr, e, total)
    end

    defp softmax_product(_expr, _e, _other), do: nil

    defp softmax(%T{type: type} = expr, e, total) do
      with %T{data: %Expr{op: :sum, args: [summed, opts]}} <- total,
           true <- same?(summed, e) and opts[:keep_axes] == true,
           axes = opts[:axes],
           %T{data: %Expr{op: :exp, args: [shifted]}} <- e,
           %T{data: %Expr{op: :subtract, args: [x, max]}} <- shifted,
           %T{data: %Expr{op: :reduce_max, args: [maxed, max_opts]}} <- without_metadata(max),
           true <- same?(maxed, x) and max_opts[:axes] == axes and max_opts[:keep_axes] == true,
           %T{type: ^type, shape: shape} <- x,
           true <- floating?(type) and is_list(axes) and axes != [] and shape == expr.shape do
        {:softmax, x, axes}
      else
        _ -> nil
      end
    end

    # ---------------------------------------------------------------------
    # Attention
    # ---------------------------------------------------------------------

    defp attention(%T{type: type, shape: {_, _, _, _}}, p, %T{type: type} = v) do
      with {:softmax, x, [3]} <- match_softmax(p),
           %T{data: %Expr{op: :add, args: [a, b]}, type: ^type, shape: scores} <- x,
           {:ok, q, k, scale, mask} <- scaled_scores(a, b) || scaled_scores(b, a),
           true <-
             floating?(type) and q.type == type and k.type == type and mask.type == type and
               ExMLX.Prediction.broadcast(mask.shape, scores) == {:ok, scores} do
        {:attention, q, k, v, mask, scale}
      else
        _ -> nil
      end
    end

    defp attention(_expr, _p, _v), do: nil

    defp match_softmax(%T{data: %Expr{op: :multiply, args: [a, b]}} = p),
      do: softmax_product(p, a, b) || softmax_product(p, b, a)

    defp match_softmax(%T{data: %Expr{op: :divide, args: [e, total]}} = p),
      do: softmax(p, e, total)

    defp match_softmax(_p), do: nil

    # `dot(q, k) * scale` and the mask added to it: `{:ok, q, k, scale, mask}`
    defp scaled_scores(%T{data: %Expr{op: :multiply, args: [c, d]}}, mask),
      do: scaled_product(c, d, mask) || scaled_product(d, c, mask)

    defp scaled_scores(_scaled, _mask), do: nil

    defp scaled_product(scale, product, mask) do
      with scale when is_number(scale) <- constant(scale),
           %T{data: %Expr{op: :dot, args: [q, [3], [0, 1], k, [3], [0, 1]]}} <- product,
           %T{shape: {_, _, _, _}} <- q do
        {:ok, q, k, scale * 1.0, mask}
      else
        _ -> nil
      end
    end

    # ---------------------------------------------------------------------
    # Rotary embedding
    # ---------------------------------------------------------------------

    defp rope(%T{type: type, shape: {batch, 1, _heads, d} = shape} = expr, direct, rotated) do
      with true <- floating?(type) and rem(d, 2) == 0,
           {x, c} <- product_of(direct, shape),
           %T{type: ^type} <- x,
           {rotation, s} <- product_of(rotated, shape),
           true <- rotate_half?(rotation, x),
           {:cos, table, idx} <- row_lookup(c, type, expr.shape),
           {:sin, sin_table, sin_idx} <- row_lookup(s, type, expr.shape),
           true <- same?(table, sin_table) and same?(idx, sin_idx),
           %T{shape: {^batch, 1}, type: {kind, _}} when kind in [:s, :u] <- idx,
           {:ok, f} <- angles(table, d) do
        {:rope, x, idx, f}
      else
        _ -> nil
      end
    end

    defp rope(_expr, _direct, _rotated), do: nil

    # `{x, other}` for a product of `x` (of `shape`) and another operand
    defp product_of(%T{data: %Expr{op: :multiply, args: [a, b]}}, shape) do
      cond do
        a.shape == shape -> {a, b}
        b.shape == shape -> {b, a}
        true -> nil
      end
    end

    defp product_of(_expr, _shape), do: nil

    # `concatenate([-x2, x1], last axis)` of `x`'s halves `x1`, `x2`
    defp rotate_half?(%T{data: %Expr{op: :concatenate, args: [[negated, x1], 3]}}, x) do
      {b, l, h, d} = x.shape
      half = div(d, 2)

      with %T{data: %Expr{op: :negate, args: [x2]}} <- negated,
           true <- half_of?(x1, x, [0, 0, 0, 0], [b, l, h, half]),
           true <- half_of?(x2, x, [0, 0, 0, half], [b, l, h, half]) do
        true
      else
        _ -> false
      end
    end

    defp rotate_half?(_rotation, _x), do: false

    defp half_of?(%T{data: %Expr{op: :slice, args: [t, start, lengths, strides]}}, x, s, l),
      do: same?(t, x) and start == s and lengths == l and Enum.all?(strides, &(&1 == 1))

    defp half_of?(_expr, _x, _start, _lengths), do: false

    # `{:cos | :sin, t, idx}` for `c`: the rows `idx` of `cos(t)` or
    # `sin(t)`, given a new axis 2 (a reshape to `{batch, 1, 1, d}`), cast to
    # `type` or of that type already
    defp row_lookup(%T{data: %Expr{op: :as_type, args: [inner]}, type: type}, type, shape),
      do: row_lookup(inner, shape)

    defp row_lookup(%T{type: type} = c, type, shape), do: row_lookup(c, shape)
    defp row_lookup(_c, _type, _shape), do: nil

    defp row_lookup(%T{data: %Expr{op: :reshape, args: [rows]}, shape: lookup}, {b, 1, _, d}) do
      with {^b, 1, 1, ^d} <- lookup,
           %T{data: %Expr{op: :block, args: [%Nx.Block.Take{axis: 0}, [trig, idx], _, _]}} <-
             rows,
           %T{data: %Expr{op: op, args: [t]}, shape: {_n, ^d}} when op in [:cos, :sin] <- trig do
        {op, t, idx}
      else
        _ -> nil
      end
    end

    defp row_lookup(_c, _shape), do: nil

    # `{:ok, f}` for `t = concatenate([a, a], 1)`, `a` the outer product of
    # `iota({n})` and `f` (`{d / 2}`, float32)
    defp angles(%T{data: %Expr{op: :concatenate, args: [[a, a2], 1]}}, d) do
      half = div(d, 2)

      with true <- same?(a, a2),
           %T{data: %Expr{op: :multiply, args: [p, q]}, shape: {n, ^half}} <- a,
           %T{data: %Expr{op: :reshape, args: [positions]}, shape: {^n, 1}} <- p,
           %T{data: %Expr{op: :iota, args: [axis]}, shape: {^n}} when axis in [nil, 0] <-
             positions,
           %T{data: %Expr{op: :reshape, args: [f]}, shape: {1, ^half}} <- q,
           %T{shape: {^half}, type: {:f, 32}} <- f do
        {:ok, f}
      else
        _ -> nil
      end
    end

    defp angles(_t, _d), do: nil

    # ---------------------------------------------------------------------
    # Helpers
    # ---------------------------------------------------------------------

    @doc "`expr` without the `metadata` nodes around it (Axon's layer names)."
    def without_metadata(%T{data: %Expr{op: :metadata, args: [expr, _meta]}}),
      do: without_metadata(expr)

    def without_metadata(expr), do: expr

    defp constant(%T{data: %Expr{op: :constant, args: [c]}}) when is_number(c), do: c
    defp constant(_expr), do: nil

    @doc """
    The boolean an attention's `mask` is made of when it is Bumblebee's
    bias, `select(admitted, 0, min_finite)` of the mask's type (0 for an
    admitted key, the type's smallest finite value for any other):
    `{:ok, admitted}`; `nil` for any other mask.
    """
    def admitted(%T{data: %Expr{op: :select, args: [pred, on_true, on_false]}, type: type} = mask) do
      least = type |> Nx.Constants.min_finite() |> Nx.to_number()

      if floating?(type) and pred.shape == mask.shape and scalar(on_true) == 0 and
           scalar(on_false) == least do
        {:ok, pred}
      end
    end

    def admitted(_mask), do: nil

    # a scalar constant's value as a float (a constant or a scalar tensor
    # of the program), else nil
    defp scalar(%T{shape: {}} = t) do
      case without_metadata(t) do
        %T{data: %Expr{op: :constant, args: [c]}} when is_number(c) -> c * 1.0
        %T{data: %Expr{op: :tensor, args: [c]}} -> c |> Nx.to_number() |> then(&(&1 * 1.0))
        _ -> nil
      end
    end

    defp scalar(_t), do: nil

    defp same?(%T{data: %Expr{id: id}}, %T{data: %Expr{id: id}}), do: true
    defp same?(_a, _b), do: false

    defp floating?({kind, _}), do: kind in [:f, :bf]
    defp floating?(_type), do: false
  end
end
