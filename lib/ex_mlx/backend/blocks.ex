if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.Blocks do
    @moduledoc false
    # ExMLX.Backend's `block/4`: MLX's own implementations of Nx's blocks
    # where it has one, Nx's definitions otherwise.

    import ExMLX.Backend.Refs

    alias Nx.Tensor, as: T

    def block(%struct_name{} = struct, output, args, fun) do
      linalg? = String.starts_with?(Atom.to_string(struct_name), "Elixir.Nx.Block.LinAlg.")
      complex? = Enum.any?(args, &match?(%T{type: {:c, _}}, &1))

      # MLX's linear algebra is real-only: complex inputs take Nx's own
      # implementation (in terms of the other callbacks).
      if linalg? and complex? do
        apply(fun, [struct | args])
      else
        native_block(struct_name, struct, output, args, fun)
      end
    end

    defp native_block(struct_name, struct, output, args, fun) do
      case {struct_name, args} do
        {Nx.Block.LogicalNot, [t]} ->
          defer(output, :logical_not, [ref(t)], [])

        {Nx.Block.Phase, [t]} ->
          phase(output, t)

        {Nx.Block.CumulativeSum, [t]} ->
          cumulative(:cumulative_sum, output, t, struct)

        {Nx.Block.CumulativeProduct, [t]} ->
          cumulative(:cumulative_product, output, t, struct)

        {Nx.Block.CumulativeMin, [t]} ->
          cumulative(:cumulative_min, output, t, struct)

        {Nx.Block.CumulativeMax, [t]} ->
          cumulative(:cumulative_max, output, t, struct)

        {Nx.Block.Take, [t, idx]} ->
          if quantized_rows?(t, struct.axis == 0 and tuple_size(idx.shape) >= 1),
            do: dequantized_rows(output, t, :take, ref(idx), [0]),
            else: defer(output, :take, [ref(t), ref(idx)], [struct.axis])

        {ExMLX.Quantization.Quantize, [t]} ->
          ExMLX.Quantization.quantize_block(struct, t)

        {Nx.Block.TakeAlongAxis, [t, idx]} ->
          defer(output, :take_along_axis, [ref(t), ref(idx)], [struct.axis])

        {Nx.Block.TopK, [t]} ->
          {values_out, indices_out} = output
          [values, indices] = run_op(:top_k, [ref(t)], [struct.k])
          {wrap(values, values_out), wrap(indices, indices_out)}

        {Nx.Block.FFT2, [t]} ->
          fft2(:fft2, output, t, struct)

        {Nx.Block.IFFT2, [t]} ->
          fft2(:ifft2, output, t, struct)

        {Nx.Block.RFFT, [t]} ->
          r = ref_as(t, real_of(output.type))
          defer(output, :rfft, [r], [struct.length, struct.axis || -1])

        {Nx.Block.IRFFT, [t]} ->
          r = ref_as(t, complex_of(output.type))
          defer(output, :irfft, [r], [struct.length, struct.axis || -1])

        {Nx.Block.AllClose, [a, b]} ->
          all_close(output, a, b, struct)

        {Nx.Block.LinAlg.Cholesky, [t]} ->
          [l] = nx_linalg(:cholesky, t, output.type)
          wrap(l, output)

        {Nx.Block.LinAlg.QR, [t]} ->
          {q_out, r_out} = output
          complete = struct.mode == :complete

          [q, r] = run_op(:nx_qr, [ref(t)], [complete, struct.eps, storage_type(q_out.type)])

          {wrap(q, q_out), wrap(r, r_out)}

        {Nx.Block.LinAlg.Eigh, [t]} ->
          {w_out, v_out} = output
          [w, v] = nx_linalg(:eigh, t, v_out.type)
          {wrap(w, w_out), wrap(v, v_out)}

        {Nx.Block.LinAlg.SVD, [t]} ->
          {u_out, s_out, vt_out} = output
          [u, s, vt] = nx_linalg(:svd, t, u_out.type)

          # The factors are full; the thin SVD keeps the first k columns of u
          # and rows of vt (k = min(m, n), the shapes Nx asks for).
          {u, vt} =
            if struct.full_matrices? do
              {u, vt}
            else
              {keep_block(u, u_out.shape), keep_block(vt, vt_out.shape)}
            end

          {wrap(u, u_out), wrap(s, s_out), wrap(vt, vt_out)}

        {Nx.Block.LinAlg.Solve, [a, b]} ->
          ref(a) |> ExMLX.Backend.LinAlg.nx_solve(ref(b), nil, output.type) |> wrap(output)

        {Nx.Block.LinAlg.Determinant, [t]} ->
          [det] = nx_linalg(:determinant, t, output.type)
          wrap(det, output)

        {Nx.Block.LinAlg.LU, [t]} ->
          lu(output, t)

        _ ->
          apply(fun, [struct | args])
      end
    end

    defp real_of({:c, 64}), do: {:f, 32}
    defp real_of(type), do: type
    defp complex_of({:f, _}), do: {:c, 64}
    defp complex_of(type), do: type

    # ExMLX's factorisations for Nx, with Nx's definitions and conventions
    # (QR's Householder signs, eigenvalues by decreasing magnitude, vector
    # signs), computed on the CPU (MLX's linear algebra runs there only: on a
    # GPU's worker, on its CPU stream) and rounded once to `type` (the nx_*
    # ops of the op table). The result references are on the tensor's device.
    defp nx_linalg(op, t, type),
      do: run_op(:"nx_#{op}", [ref(t)], [storage_type(type)])

    defp keep_block(r, shape) do
      stops = Tuple.to_list(shape)
      starts = Enum.map(stops, fn _ -> 0 end)
      strides = Enum.map(stops, fn _ -> 1 end)
      op(:slice, [r], [starts, stops, strides])
    end

    defp lu({p_out, l_out, u_out}, t) do
      [p, l, u] = nx_linalg(:lu, t, l_out.type)
      # MLX gives the row order as indices: row i of a is row p[i] of l · u.
      # Nx wants the permutation matrix P with a = P · l · u, that is
      # P[i][j] = (j == p[i]), built from the indices by an equality against
      # an iota along the last axis.
      device = device_of(t)
      rank = tuple_size(p_out.shape)
      iota = op(:iota, [], [{:u, 32}, p_out.shape, rank - 1, device])
      pcol = op(:expand_dims, [p], [[-1]])
      pcol = op(:as_type, [pcol], [{:u, 32}])
      perm = op(:equal, [pcol, iota], [])
      {wrap(perm, p_out), wrap(l, l_out), wrap(u, u_out)}
    end

    defp cumulative(op, output, t, %{axis: axis, reverse: reverse}) do
      defer(output, op, [ref_as(t, output.type)], [axis, reverse])
    end

    defp fft2(op, %T{type: type} = output, t, %{lengths: lengths, axes: axes}) do
      r = ref_as(t, type)
      defer(output, op, [r], [lengths, axes || [-2, -1]])
    end

    defp phase(output, t) do
      case t.type do
        {:c, _} ->
          re = op(:real, [ref(t)], [])
          im = op(:imag, [ref(t)], [])
          defer(output, :atan2, [im, re], [])

        _ ->
          # real numbers: 0 for x >= 0, pi for x < 0
          x = ref_as(t, output.type)
          zero = scalar_ref(0, output.type, device_of(t))
          pi = scalar_ref(:math.pi(), output.type, device_of(t))
          neg = op(:less, [x, zero], [])
          defer(output, :select, [neg, pi, zero], [])
      end
    end

    # all_close: |a - b| <= atol + rtol * |b| everywhere (rtol then atol, as Nx defines).
    defp all_close(output, a, b, %{rtol: rtol, atol: atol, equal_nan: equal_nan}) do
      type = Nx.Type.merge(Nx.Type.to_floating(a.type), Nx.Type.to_floating(b.type))
      device = device_of(a)
      ra = ref_as(a, type)
      rb = ref_as(b, type)
      diff = op(:subtract, [ra, rb], [])
      diff = op(:abs, [diff], [])
      absb = op(:abs, [rb], [])
      real = real_of(type)
      tol = op(:multiply, [scalar_ref(rtol, real, device), absb], [])
      tol = op(:add, [scalar_ref(atol, real, device), tol], [])
      close = op(:less_equal, [diff, tol], [])
      # where either side is infinite, close means equal
      same = op(:equal, [ra, rb], [])
      inf_a = op(:is_infinity, [ra], [])
      inf_b = op(:is_infinity, [rb], [])
      inf = op(:logical_or, [inf_a, inf_b], [])
      close = op(:select, [inf, same, close], [])

      close =
        if equal_nan do
          na = op(:is_nan, [ra], [])
          nb = op(:is_nan, [rb], [])
          both = op(:logical_and, [na, nb], [])
          op(:logical_or, [close, both], [])
        else
          close
        end

      defer(output, :all, [close], [nil, false])
    end
  end
end
