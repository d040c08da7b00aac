defmodule ExMLX.FFT do
  @moduledoc """
  Discrete Fourier transforms, as MLX's `mlx.core.fft` has them; like it,
  they follow `numpy.fft`.

    * `fft/2`, `ifft/2`, `rfft/2`, `irfft/2` transform one axis: `:axis`
      (default the last), with `:n` points.
    * `fft2/2`, `ifft2/2`, `rfft2/2`, `irfft2/2` transform two axes:
      `:axes` (default `[-2, -1]`), with lengths `:s`.
    * `fftn/2`, `ifftn/2`, `rfftn/2`, `irfftn/2` transform any number of
      axes: `:axes` defaults to the last `length(s)` axes when `:s` is
      given, otherwise to every axis.
    * `fftshift/2` and `ifftshift/2` move the zero-frequency term to the
      centre of a spectrum and back.

  Lengths (`:n`, `:s`) crop the input or pad it with zeros along each
  transformed axis; they default to the axes' sizes. The inverse real
  transforms are the exception: their lengths are those of the *output*,
  the input's last transformed axis being cropped or padded to
  `div(n, 2) + 1` points, and its default is `2 * (m - 1)` for an input
  axis of `m` points (give `:n` for an odd-length output).

  Normalisation is numpy's default ("backward"): the forward transforms are
  unscaled and the inverse ones divide by the number of points.

  ## Types

  The complex transforms (`fft*`, `ifft*`) return `{:c, 64}`, `rfft*`
  returns `{:c, 64}` and `irfft*` returns `{:f, 32}`. Real inputs (`:bool`,
  integers, `{:f, 16}`, `{:bf, 16}`, `{:f, 32}`) are converted to `{:f, 32}`
  or `{:c, 64}` first, as MLX does (integers beyond 2²⁴ are rounded).

  MLX computes every transform in complex64 and has no complex128, so a
  `{:f, 64}` input raises `ExMLX.Error` (kind `:type`) rather than being
  narrowed: convert it with `ExMLX.as_type(t, {:f, 32})` if single precision
  is enough. `rfft*` takes real input only: a complex input raises (kind
  `:type`) rather than losing its imaginary part. The shifts take any type.

  ## Errors

  Options must be a keyword list of the documented keys: an unknown option, or a
  value of the wrong kind (`n: 0`, `axes: :last`), raises `ArgumentError`.
  What depends on the tensor raises `ExMLX.Error` of kind `:argument`, its
  message naming the option: an axis out of range, an axis given twice,
  `:s` and `:axes` of different lengths, a rank-0 tensor, a default length
  of 0 (an empty axis; `irfft` of one point).

      iex> t = ExMLX.iota({:f, 32}, {4})
      iex> ExMLX.FFT.fft(t) |> ExMLX.to_list()
      [{6.0, 0.0}, {-2.0, 2.0}, {-2.0, 0.0}, {-2.0, -2.0}]
      iex> ExMLX.FFT.fft(t, axis: 1)
      ** (ExMLX.Error) axis: axis 1 is out of range for a tensor of rank 1
  """

  import ExMLX.Args, only: [opts!: 2, tensor!: 2]

  alias ExMLX.{Op, Tensor}

  @typedoc "An axis; negative ones count from the end (`-1` is the last)."
  @type axis :: integer()

  @typedoc "Options of the 1-D transforms."
  @type opts_1d :: [n: pos_integer() | nil, axis: axis()]

  @typedoc "Options of the 2-D and N-D transforms."
  @type opts_nd :: [s: [pos_integer()] | nil, axes: [axis()] | nil]

  @typedoc "Options of the shifts."
  @type opts_shift :: [axes: [axis()] | nil]

  @shifts [:fftshift, :ifftshift]

  # ---------------------------------------------------------------------------
  # One axis
  # ---------------------------------------------------------------------------

  @doc """
  The discrete Fourier transform along one axis.

  Options:

    * `:n` - the number of points: the input is cropped or zero-padded to it
      (default: the axis' size)
    * `:axis` - the axis to transform (default `-1`)

  Returns `{:c, 64}`.

      iex> t = ExMLX.iota({:f, 32}, {2, 2})
      iex> ExMLX.FFT.fft(t, axis: 0) |> ExMLX.to_list()
      [{2.0, 0.0}, {4.0, 0.0}, {-2.0, 0.0}, {-2.0, 0.0}]

  Zero-padding `[1, 1]` to four points:

      iex> ExMLX.FFT.fft(ExMLX.full(1.0, {:f, 32}, {2}), n: 4) |> ExMLX.to_list()
      [{2.0, 0.0}, {1.0, -1.0}, {0.0, 0.0}, {1.0, 1.0}]
  """
  @spec fft(Tensor.t(), opts_1d()) :: Tensor.t()
  def fft(tensor, opts \\ []), do: transform_1d(:fft, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `fft/2`: the transform with conjugate twiddles, divided by
  `n`. Options as for `fft/2`; returns `{:c, 64}`.

      iex> t = ExMLX.iota({:f, 32}, {4})
      iex> t |> ExMLX.FFT.fft() |> ExMLX.FFT.ifft() |> ExMLX.to_list()
      [{0.0, 0.0}, {1.0, 0.0}, {2.0, 0.0}, {3.0, 0.0}]
  """
  @spec ifft(Tensor.t(), opts_1d()) :: Tensor.t()
  def ifft(tensor, opts \\ []), do: transform_1d(:ifft, tensor!(tensor, :tensor), opts)

  @doc """
  The transform of a real input along one axis, keeping the
  `div(n, 2) + 1` non-negative frequencies (the others are their complex
  conjugates). Options as for `fft/2`; returns `{:c, 64}`. Complex input
  raises `ExMLX.Error` (use `fft/2`).

      iex> t = ExMLX.iota({:f, 32}, {4})
      iex> ExMLX.FFT.rfft(t) |> ExMLX.to_list()
      [{6.0, 0.0}, {-2.0, 2.0}, {-2.0, 0.0}]
      iex> ExMLX.FFT.rfft(t, n: 5) |> ExMLX.shape()
      {3}
  """
  @spec rfft(Tensor.t(), opts_1d()) :: Tensor.t()
  def rfft(tensor, opts \\ []), do: transform_1d(:rfft, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `rfft/2`: `n` real points from `div(n, 2) + 1`
  frequencies (the input is cropped or zero-padded to that many).

  Options: `:n`, the output's length (default `2 * (m - 1)` for an input
  axis of `m` points, so odd lengths must be given), and `:axis` (default
  `-1`). Returns `{:f, 32}`.

      iex> t = ExMLX.from_binary(<<1.0::32-float-little, 2.0::32-float-little, 4.0::32-float-little>>, {:f, 32}, {3})
      iex> spectrum = ExMLX.FFT.rfft(t)
      iex> ExMLX.FFT.irfft(spectrum, n: 3) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 5))
      [1.0, 2.0, 4.0]
      iex> ExMLX.FFT.irfft(spectrum) |> ExMLX.shape()
      {2}
  """
  @spec irfft(Tensor.t(), opts_1d()) :: Tensor.t()
  def irfft(tensor, opts \\ []), do: transform_1d(:irfft, tensor!(tensor, :tensor), opts)

  # ---------------------------------------------------------------------------
  # Two axes
  # ---------------------------------------------------------------------------

  @doc """
  The discrete Fourier transform over two axes.

  Options:

    * `:s` - the two lengths: the input is cropped or zero-padded to them
      (default: the axes' sizes)
    * `:axes` - the two axes to transform (default `[-2, -1]`)

  Returns `{:c, 64}`. `fftn/2` transforms any number of axes.

      iex> t = ExMLX.iota({:f, 32}, {2, 2})
      iex> ExMLX.FFT.fft2(t) |> ExMLX.to_list()
      [{6.0, 0.0}, {-2.0, 0.0}, {-4.0, 0.0}, {0.0, 0.0}]
  """
  @spec fft2(Tensor.t(), opts_nd()) :: Tensor.t()
  def fft2(tensor, opts \\ []), do: transform_nd(:fft2, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `fft2/2`. Options as for `fft2/2`; returns `{:c, 64}`.

      iex> t = ExMLX.iota({:f, 32}, {2, 2})
      iex> t |> ExMLX.FFT.fft2() |> ExMLX.FFT.ifft2() |> ExMLX.real() |> ExMLX.to_list()
      [0.0, 1.0, 2.0, 3.0]
  """
  @spec ifft2(Tensor.t(), opts_nd()) :: Tensor.t()
  def ifft2(tensor, opts \\ []), do: transform_nd(:ifft2, tensor!(tensor, :tensor), opts)

  @doc """
  The transform of a real input over two axes, keeping the non-negative
  frequencies of the last one (`div(n, 2) + 1` of them). Options as for
  `fft2/2`; returns `{:c, 64}`.

      iex> t = ExMLX.iota({:f, 32}, {2, 3})
      iex> ExMLX.FFT.rfft2(t) |> ExMLX.shape()
      {2, 2}
      iex> ExMLX.FFT.rfft2(t) |> ExMLX.to_list() |> Enum.map(fn {re, im} -> {Float.round(re, 4), Float.round(im, 4)} end)
      [{15.0, 0.0}, {-3.0, 1.7321}, {-9.0, 0.0}, {0.0, 0.0}]
  """
  @spec rfft2(Tensor.t(), opts_nd()) :: Tensor.t()
  def rfft2(tensor, opts \\ []), do: transform_nd(:rfft2, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `rfft2/2`. `:s` gives the output's lengths (default: the
  input's, but `2 * (m - 1)` for the last axis); `:axes` defaults to
  `[-2, -1]`. Returns `{:f, 32}`.

      iex> t = ExMLX.iota({:f, 32}, {2, 3})
      iex> t |> ExMLX.FFT.rfft2() |> ExMLX.FFT.irfft2(s: [2, 3]) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 5))
      [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
  """
  @spec irfft2(Tensor.t(), opts_nd()) :: Tensor.t()
  def irfft2(tensor, opts \\ []), do: transform_nd(:irfft2, tensor!(tensor, :tensor), opts)

  # ---------------------------------------------------------------------------
  # Any number of axes
  # ---------------------------------------------------------------------------

  @doc """
  The discrete Fourier transform over any number of axes.

  Options:

    * `:s` - one length per axis: the input is cropped or zero-padded to them
      (default: the axes' sizes)
    * `:axes` - the axes to transform, each at most once (default: the last
      `length(s)` axes when `:s` is given, otherwise every axis)

  Returns `{:c, 64}`.

      iex> t = ExMLX.full(1.0, {:f, 32}, {2, 2, 2})
      iex> ExMLX.FFT.fftn(t) |> ExMLX.to_list() |> Enum.map(fn {re, _im} -> re end)
      [8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
      iex> ExMLX.FFT.fftn(t, s: [3]) |> ExMLX.shape()
      {2, 2, 3}
  """
  @spec fftn(Tensor.t(), opts_nd()) :: Tensor.t()
  def fftn(tensor, opts \\ []), do: transform_nd(:fftn, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `fftn/2`. Options as for `fftn/2`; returns `{:c, 64}`.

      iex> t = ExMLX.iota({:f, 32}, {2, 1, 2})
      iex> t |> ExMLX.FFT.fftn() |> ExMLX.FFT.ifftn(axes: [0, 2]) |> ExMLX.real() |> ExMLX.to_list()
      [0.0, 1.0, 2.0, 3.0]
  """
  @spec ifftn(Tensor.t(), opts_nd()) :: Tensor.t()
  def ifftn(tensor, opts \\ []), do: transform_nd(:ifftn, tensor!(tensor, :tensor), opts)

  @doc """
  The transform of a real input over any number of axes, keeping the
  non-negative frequencies of the last one. Options as for `fftn/2`;
  returns `{:c, 64}`.

      iex> t = ExMLX.full(1.0, {:f, 32}, {2, 3, 4})
      iex> r = ExMLX.FFT.rfftn(t)
      iex> {ExMLX.shape(r), r |> ExMLX.to_list() |> hd()}
      {{2, 3, 3}, {24.0, 0.0}}
  """
  @spec rfftn(Tensor.t(), opts_nd()) :: Tensor.t()
  def rfftn(tensor, opts \\ []), do: transform_nd(:rfftn, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `rfftn/2`. `:s` gives the output's lengths (default: the
  input's, but `2 * (m - 1)` for the last transformed axis); `:axes` as for
  `fftn/2`. Returns `{:f, 32}`.

      iex> t = ExMLX.iota({:f, 32}, {1, 2, 3})
      iex> t |> ExMLX.FFT.rfftn() |> ExMLX.FFT.irfftn(s: [1, 2, 3]) |> ExMLX.to_list() |> Enum.map(&Float.round(&1, 5))
      [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
  """
  @spec irfftn(Tensor.t(), opts_nd()) :: Tensor.t()
  def irfftn(tensor, opts \\ []), do: transform_nd(:irfftn, tensor!(tensor, :tensor), opts)

  # ---------------------------------------------------------------------------
  # Shifts
  # ---------------------------------------------------------------------------

  @doc """
  Moves the zero-frequency term to the centre: rolls each axis of size `m`
  by `div(m, 2)`, so the frequencies of an `fft` come out in increasing
  order.

  Options: `:axes`, the axes to shift (default every axis; a rank-0 tensor
  comes back unchanged). Any type; the result has the input's type.

      iex> t = ExMLX.iota({:s, 32}, {5})
      iex> ExMLX.FFT.fftshift(t) |> ExMLX.to_list()
      [3, 4, 0, 1, 2]
      iex> ExMLX.iota({:s, 32}, {2, 4}) |> ExMLX.FFT.fftshift(axes: [1]) |> ExMLX.to_list()
      [2, 3, 0, 1, 6, 7, 4, 5]
  """
  @spec fftshift(Tensor.t(), opts_shift()) :: Tensor.t()
  def fftshift(tensor, opts \\ []), do: shift(:fftshift, tensor!(tensor, :tensor), opts)

  @doc """
  The inverse of `fftshift/2`: rolls each axis of size `m` by
  `-div(m, 2)`. The two differ for odd sizes. Options as for `fftshift/2`.

      iex> t = ExMLX.iota({:s, 32}, {5})
      iex> ExMLX.FFT.ifftshift(t) |> ExMLX.to_list()
      [2, 3, 4, 0, 1]
      iex> t |> ExMLX.FFT.fftshift() |> ExMLX.FFT.ifftshift() |> ExMLX.to_list()
      [0, 1, 2, 3, 4]
  """
  @spec ifftshift(Tensor.t(), opts_shift()) :: Tensor.t()
  def ifftshift(tensor, opts \\ []), do: shift(:ifftshift, tensor!(tensor, :tensor), opts)

  # ---------------------------------------------------------------------------
  # The native calls
  # ---------------------------------------------------------------------------

  # Every transform is an op of the op table (native/ex_mlx/core/src/ops/table.rs,
  # flagged `nx`): the 1-D ops take `[n, axis]`, the others `[s, axes]`, nil
  # meaning the op's default. This module runs them and waits; ExMLX.Backend
  # queues the same ops (Nx knowing the result's shape and type).

  defp transform_1d(op, %Tensor{ref: ref}, opts) do
    opts = opts!(opts, n: nil, axis: -1)
    n = check_opt(opts[:n], :n, &pos_integer?/1, "a positive integer or nil")
    axis = check_opt(opts[:axis], :axis, &is_integer/1, "an integer")
    run(op, ref, [n, axis])
  end

  defp transform_nd(op, %Tensor{ref: ref}, opts) do
    opts = opts!(opts, s: nil, axes: nil)
    s = check_opt(opts[:s], :s, &pos_integers?/1, "a list of positive integers or nil")
    axes = check_opt(opts[:axes], :axes, &integers?/1, "a list of integers or nil")
    run(op, ref, [s, axes])
  end

  defp shift(op, %Tensor{ref: ref}, opts) when op in @shifts do
    opts = opts!(opts, axes: nil)
    axes = check_opt(opts[:axes], :axes, &integers?/1, "a list of integers or nil")
    run(op, ref, [axes])
  end

  defp run(op, ref, params), do: op |> Op.run([ref], params) |> Tensor.wrap()

  defp check_opt(value, name, valid?, expected) do
    if valid?.(value) do
      value
    else
      raise ArgumentError, "expected :#{name} to be #{expected}, got: #{inspect(value)}"
    end
  end

  defp pos_integer?(n), do: n == nil or (is_integer(n) and n > 0)

  defp pos_integers?(nil), do: true
  defp pos_integers?(list), do: all?(list, &(is_integer(&1) and &1 > 0))

  defp integers?(nil), do: true
  defp integers?(list), do: all?(list, &is_integer/1)

  # (false for anything but a proper list)
  defp all?([], _valid?), do: true
  defp all?([x | rest], valid?), do: valid?.(x) and all?(rest, valid?)
  defp all?(_, _valid?), do: false
end
