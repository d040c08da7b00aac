if Code.ensure_loaded?(Nx) do
  defmodule ExMLX.Backend.LinAlg do
    @moduledoc false
    # ExMLX.Backend's products, convolutions, triangular solves and FFTs
    # (its `dot/7`, `conv/4`, `triangular_solve/4`, `fft/3` and `ifft/3`).

    import ExMLX.Backend.Refs

    alias Nx.Tensor, as: T
    alias ExMLX.Op

    # A quantized right operand contracted over one axis, no batch axes:
    # MLX's quantized_matmul on its packed values (ExMLX.Quantization).
    def dot(
          %T{type: type} = out,
          %T{type: type} = a,
          [axis_a],
          [],
          %T{
            type: type,
            shape: {_, _},
            data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}
          },
          [axis_b],
          []
        ) do
      {inputs, params} = quantized_product(a, axis_a, q, axis_b)
      defer(out, :quantized_matmul, inputs, params)
    end

    # A quantized left operand, the right one of rank 2 or more: the same
    # product with the operands swapped, `b · A` (or `b · Aᵀ`), its last
    # axis (A's free one) then moved to the front as Nx.dot orders it.
    def dot(
          %T{type: type} = out,
          %T{
            type: type,
            shape: {_, _},
            data: %ExMLX.Backend{quantization: %ExMLX.Quantization{} = q}
          },
          [axis_a],
          [],
          %T{type: type, shape: shape} = b,
          [axis_b],
          []
        )
        when tuple_size(shape) >= 2 do
      {inputs, params} = quantized_product(b, axis_b, q, axis_a)
      swapped = op(:quantized_matmul, inputs, params)
      last = tuple_size(shape) - 1
      defer(out, :transpose, [swapped], [[last | Enum.to_list(0..(last - 1)//1)]])
    end

    def dot(
          %T{type: type, shape: out_shape} = out,
          a,
          contract_a,
          batch_a,
          b,
          contract_b,
          batch_b
        ) do
      ra = ref_as(a, type)
      rb = ref_as(b, type)

      if batch_a == [] and batch_b == [] do
        defer(out, :tensordot, [ra, rb], [contract_a, contract_b])
      else
        # [batch, free_a, contract] · [batch, contract, free_b] as batched matmuls.
        free_a = free_axes(a, contract_a ++ batch_a)
        free_b = free_axes(b, contract_b ++ batch_b)
        lhs = transposed(ra, batch_a ++ free_a ++ contract_a)
        rhs = transposed(rb, batch_b ++ contract_b ++ free_b)

        # One free and one contracted axis each: matmul takes the transposed
        # views as they are, its result already [batch.., free_a, free_b]
        # (reshaping a transposed view would copy it: attention's keys and
        # values, views of their cache, at every decoding step).
        {lhs, rhs} =
          if match?({[_], [_], [_]}, {free_a, contract_a, free_b}) do
            {lhs, rhs}
          else
            size = fn t, axes -> Enum.reduce(axes, 1, &(elem(t.shape, &1) * &2)) end
            nb = batch_a |> Enum.map(&elem(a.shape, &1)) |> Enum.product()
            lhs = op(:reshape, [lhs], [{nb, size.(a, free_a), size.(a, contract_a)}])
            rhs = op(:reshape, [rhs], [{nb, size.(b, contract_b), size.(b, free_b)}])
            {lhs, rhs}
          end

        product = op(:matmul, [lhs, rhs], [])
        defer(out, :reshape, [product], [out_shape])
      end
    end

    # `quantized_matmul`'s inputs and parameters for the tensor `x`
    # contracted over its `axis_x` with the quantized matrix `q` over its
    # logical `axis_q` (x's other axes first, in order)
    defp quantized_product(%T{shape: shape} = x, axis_x, q, axis_q) do
      last = tuple_size(shape) - 1
      others = Enum.reject(0..last, &(&1 == axis_x))
      x = if axis_x == last, do: ref(x), else: transposed(ref(x), others ++ [axis_x])
      # the stored matrix P is the quantized operand itself, or its
      # transpose: x · P contracts P's first axis, x · Pᵀ its second
      transpose = q.transposed == (axis_q == 0)
      {[x | ExMLX.Quantization.stored_refs(q)], [transpose, q.group_size, q.bits]}
    end

    defp free_axes(%T{shape: shape}, used),
      do: Enum.reject(0..(tuple_size(shape) - 1)//1, &(&1 in used))

    def conv(%T{type: type} = out, input, kernel, opts) do
      cond do
        (opts[:batch_group_size] || 1) != 1 ->
          # Not expressible with MLX's convolution: computed by Nx.BinaryBackend.
          via_binary_backend(out, [input, kernel], &Nx.BinaryBackend.conv(out, &1, &2, opts))

        Nx.Type.complex?(type) ->
          # (a + bi) * (c + di) = (ac - bd) + (ad + bc)i, with four real convolutions.
          {ar, ai} = complex_parts(ref_as(input, type))
          {kr, ki} = complex_parts(ref_as(kernel, type))
          conv_real = fn x, k -> conv_ref(x, k, tuple_size(input.shape), opts) end

          re = op(:subtract, [conv_real.(ar, kr), conv_real.(ai, ki)], [])

          im = op(:add, [conv_real.(ar, ki), conv_real.(ai, kr)], [])
          i = scalar_ref({0.0, 1.0}, {:c, 64}, device_of(input))
          im = op(:multiply, [im, i], [])
          defer(out, :add, [re, im], [])

        true ->
          r = conv_ref(ref_as(input, type), ref_as(kernel, type), tuple_size(input.shape), opts)
          defer(out, :reshape, [r], [out.shape])
      end
    end

    defp complex_parts(r) do
      re = op(:real, [r], [])
      im = op(:imag, [r], [])
      {re, im}
    end

    # Nx's convolution (with its permutations) through MLX's channels-last one.
    defp conv_ref(ri, rk, rank, opts) do
      spatial = rank - 2
      in_perm = opts[:input_permutation] || Enum.to_list(0..(rank - 1))
      k_perm = opts[:kernel_permutation] || Enum.to_list(0..(rank - 1))
      out_perm = opts[:output_permutation] || Enum.to_list(0..(rank - 1))
      # Nx: [batch, channels, spatial...] after the input permutation; MLX
      # wants [batch, spatial..., channels] (kernels likewise).
      to_last = [0] ++ Enum.to_list(2..(rank - 1)//1) ++ [1]
      in_order = Enum.map(to_last, fn i -> Enum.at(in_perm, i) end)
      k_order = Enum.map(to_last, fn i -> Enum.at(k_perm, i) end)
      ri = op(:transpose, [ri], [in_order])
      rk = op(:transpose, [rk], [k_order])
      strides = opts[:strides] || List.duplicate(1, spatial)
      padding = opts[:padding] || List.duplicate({0, 0}, spatial)
      kd = opts[:kernel_dilation] || List.duplicate(1, spatial)
      id = opts[:input_dilation] || List.duplicate(1, spatial)
      groups = opts[:feature_group_size] || 1
      result = op(:conv, [ri, rk], [strides, padding, kd, id, groups])
      # [batch, spatial..., out_channels] -> [batch, out_channels, spatial...],
      # then the output permutation.
      from_last = [0, rank - 1] ++ Enum.to_list(1..(rank - 2)//1)
      nchw = op(:transpose, [result], [from_last])
      order = out_perm_order(out_perm)
      op(:transpose, [nchw], [order])
    end

    # Nx's output_permutation says where each of [batch, channels, spatial...]
    # goes; the transpose wants, for each output axis, its source axis.
    defp out_perm_order(out_perm) do
      out_perm
      |> Enum.with_index()
      |> Enum.sort_by(fn {dest, _src} -> dest end)
      |> Enum.map(fn {_dest, src} -> src end)
    end

    def triangular_solve(out, %T{type: {:c, _}} = a, b, opts),
      do: via_binary_backend(out, [a, b], &Nx.BinaryBackend.triangular_solve(out, &1, &2, opts))

    def triangular_solve(out, a, %T{type: {:c, _}} = b, opts),
      do: via_binary_backend(out, [a, b], &Nx.BinaryBackend.triangular_solve(out, &1, &2, opts))

    def triangular_solve(%T{type: type} = out, a, b, opts) do
      # Nx raises for a singular triangular matrix (a zero on the diagonal);
      # LAPACK would return infinities.
      if singular_triangular?(a), do: raise(ArgumentError, "can't solve for singular matrix")
      triangular_solve_native(out, a, b, opts, type)
    end

    defp singular_triangular?(%T{shape: shape} = a) do
      rank = tuple_size(shape)
      n = elem(shape, rank - 1)
      device = device_of(a)
      eye = op(:eye, [], [n, {:u, 8}, n, device])
      zero = scalar_ref(0, a.type, device)
      is_zero = op(:equal, [ref(a), zero], [])
      on_diag = op(:logical_and, [is_zero, eye], [])
      any = op(:any, [on_diag], [nil, false])
      Op.item(any)
    end

    defp triangular_solve_native(out, a, b, opts, type) do
      lower = Keyword.get(opts, :lower, true)
      left_side = Keyword.get(opts, :left_side, true)
      transform = Keyword.get(opts, :transform_a, :none)
      ra = ref(a)
      rb = ref(b)
      rank = tuple_size(a.shape)
      swap = Enum.to_list(0..(rank - 3)//1) ++ [rank - 1, rank - 2]

      {ra, lower} =
        case transform do
          :none ->
            {ra, lower}

          :transpose ->
            {op(:transpose, [ra], [swap]), not lower}

          # element-wise conjugate, no transpose (the identity for real a)
          :conjugate ->
            {conj_ref(ra), lower}
        end

      if left_side do
        ra |> nx_solve(rb, if(lower, do: :lower, else: :upper), type) |> wrap(out)
      else
        at = op(:transpose, [ra], [swap])
        kind = if lower, do: :upper, else: :lower
        rb_rank = tuple_size(b.shape)

        if rb_rank < rank do
          # a vector b (one axis fewer than a): x·a = b  <=>  aᵀ·x = b
          at |> nx_solve(rb, kind, type) |> wrap(out)
        else
          # x·a = b  <=>  aᵀ·xᵀ = bᵀ
          b_swap = Enum.to_list(0..(rb_rank - 3)//1) ++ [rb_rank - 1, rb_rank - 2]
          bt = op(:transpose, [rb], [b_swap])
          xt = nx_solve(at, bt, kind, type)
          defer(out, :transpose, [xt], [b_swap])
        end
      end
    end

    # x with a·x = b (b a batch of matrices, or of vectors), computed on the
    # CPU (MLX's linear algebra runs there only: on a GPU's worker, on its CPU
    # stream) and rounded once to `type` (the op nx_solve).
    # A singular `a` raises ArgumentError, as in Nx.
    @doc false
    def nx_solve(ra, rb, kind, type) do
      [x] = run_op(:nx_solve, [ra, rb], [kind, storage_type(type)])
      x
    rescue
      e in ExMLX.Error ->
        if e.kind == :argument,
          do: raise(ArgumentError, e.message),
          else: reraise(e, __STACKTRACE__)
    end

    defp conj_ref(r), do: op(:conjugate, [r], [])

    def fft(out, tensor, opts), do: fft_op(:fft, out, tensor, opts)

    def ifft(out, tensor, opts), do: fft_op(:ifft, out, tensor, opts)

    # Every transform is the op ExMLX.FFT runs,
    # queued rather than awaited: Nx knows the result's shape and type.
    defp fft_op(op, %T{type: type} = out, tensor, opts) do
      r = ref_as(tensor, type)
      defer(out, op, [r], [opts[:length], opts[:axis] || -1])
    end
  end
end
