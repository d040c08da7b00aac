defmodule ExMLX.NxDoctestExclusions do
  @moduledoc false
  # The few Nx doctests ExMLX.Backend does not pass, one by one, each with
  # its reason (test/backend/nx_doctest_test.exs runs the rest).
  #
  # ExUnit's `doctest` can leave out whole functions only, so these are
  # excluded by test name through ExUnit's `:test` filter, set in
  # test_helper.exs; they are reported as excluded, never run. ExUnit names
  # a doctest after its function and its place among all of the module's
  # doctests, a number that moves between Nx versions (Nx 0.13 added
  # doctests before Nx 0.12's); an exclusion names the function and the
  # doctest's rank among that function's (`{"Nx.erf_inv/1", 2, reason}`:
  # its second doctest; a list of ranks where several share the reason), and
  # the test name is looked up in the running Nx.
  # A test in each doctest module checks that every one names a doctest
  # there. (`mix test` given a file and line, or `--only`, includes tests
  # explicitly and overrides this filter.)
  #
  # Most of them are f32 rounding. Nx documents what Nx.BinaryBackend
  # prints, and its factorisations (Cholesky, LU, the Jacobi eigh, the
  # QDWH SVD) are Nx algorithms run in f32, one rounding per step: their
  # last digits differ from the exact result rounded once, and from MLX's
  # LAPACK. ExMLX computes QR, eigh, SVD and triangular solves in f64 and
  # rounds once (see ExMLX.Backend); the values it gives instead are
  # checked against exact values in ExMLX.Backend.LinAlgTest.

  @exclusions %{
    Nx => [
      {"Nx.erf_inv/1", 1,
       "f64 erf_inv(0.1): Nx evaluates Giles' single-precision polynomial " <>
         "(0.08885598780483887); ExMLX computes it to f64 precision (0.08885599049425769)"},
      {"Nx.erf_inv/1", 2, "the same for erf_inv([0.1, 0.5, 0.9]) in f64"},
      {"Nx.log1p/1", 2,
       "log1p(2.0) in f64, 1 ulp: Nx computes log(1 + x) (1.0986122886681098), " <>
         "ExMLX the C library's log1p (1.0986122886681096)"}
    ],
    Nx.LinAlg => [
      {"Nx.LinAlg.cholesky/1", 2,
       "cholesky([[2, 3], [3, 5]]) in f32: l = [[√2, 0], [3/√2, 1/√2]]; Nx's steps give " <>
         "2.1213205, 0.7071065, LAPACK's (MLX) 2.1213202, 0.7071071 (rounded once: " <>
         "2.1213202, 0.70710677)"},
      {"Nx.LinAlg.cholesky/1", 5, "the same matrix, vectorized"},
      {"Nx.LinAlg.qr/2", 4,
       "r[2][2] = √2 and q[2][2] = q[3][2] = 1/√2: Nx's f32 Householder steps give " <>
         "1.4142137 and 0.7071068, ExMLX (f64, rounded once) 1.4142135 and 0.70710677"},
      {"Nx.LinAlg.pinv/2", 5,
       "pinv([[1, 1], [3, 4]]) is the inverse [[4, -1], [-3, 1]]: Nx's f32 SVD gives " <>
         "4.0000577, -1.0000169, ...; ExMLX 4.0, -1.0000001, -3.0, 1.0000001"},
      {"Nx.LinAlg.eigh/2", 2,
       "the eigenvalue -1 is double, so any orthonormal basis of its eigenspace is an " <>
         "answer (Nx's Jacobi and LAPACK pick different ones); Nx's f32 digits for " <>
         "1/√6 are 0.40824828 and 0.40824834 (0.4082483 rounded once)"},
      {"Nx.LinAlg.eigh/2", 3,
       "eigenvector component of [[2, 5], [5, 6]]: 0.82806724 rounded once, 0.8280672 " <>
         "from Nx's f32 Jacobi rotations (the signs agree)"},
      {"Nx.LinAlg.eigh/2", 4, "the same matrices, vectorized"},
      {"Nx.LinAlg.svd/2", 2,
       "Nx's f32 QDWH iteration gives u[0][1] = 0.99999994 and s[1] = 1.9999999 " <>
         "where the exact values are 1.0 and 2.0 (ExMLX's)"},
      {"Nx.LinAlg.solve/2", 4,
       "solve is LU then two triangular solves; ExMLX's f32 LU is LAPACK's, whose " <>
         "rounding differs from Nx's f32 LU for [[14, 10], [9, 9]]: exact -1/3, 4/9, " <>
         "2/3, -2/9; Nx -0.3333333, 0.44444442, 0.6666666, -0.2222222; ExMLX " <>
         "-0.33333334, 0.4444445, 0.6666667, -0.22222233"},
      {"Nx.LinAlg.lu/1", 3,
       "p, l and u match; the check p·l·u goes through Nx.dot, which " <>
         "Nx.BinaryBackend accumulates in f64 (3.9999998, 0.9999999) and MLX in f32 " <>
         "(4.0, 1.0)"},
      {"Nx.LinAlg.matrix_power/2", 6,
       "the inverse of [[4, 5], [6, 7]] cubed is exactly [[-110.375, 76.875], " <>
         "[92.25, -64.25]]; Nx's f32 inverse gives -110.37471, 76.87479, ...; ExMLX " <>
         "-110.37501, 76.87501, 92.250015, -64.250015"},
      {"Nx.LinAlg.determinant/1", 7,
       "both determinants are 630; the second through Nx's f32 LU is 630.00006, " <>
         "through LAPACK's f32 LU 629.99994"},
      {"Nx.LinAlg.least_squares/3", 1,
       "least squares is pinv(a)·b, pinv by SVD: exact [1, 0]; Nx [1.0000005, " <>
         "-2.3841858e-7], ExMLX [0.99999976, 2.3841858e-7]"},
      {"Nx.LinAlg.least_squares/3", 2,
       "the same: exact [1, -0.95]; Nx [1.0000001, -0.95000035], ExMLX [0.9999999, -0.95]"},
      {"Nx.LinAlg.least_squares/3", 3,
       "the same: exact [-1/18, 1/9, 5/18]; Nx [-0.055555582, 0.111111075, " <>
         "0.27777776], ExMLX [-0.055555582, 0.1111111, 0.27777782]"}
    ],
    Nx.Random => [
      {"Nx.Random.normal/4", 1,
       "a normal sample is √2·erf_inv(u): Nx.BinaryBackend's f32 erf_inv evaluates " <>
         "Giles' polynomial in f64, ExMLX's is MLX's f32 one; they agree on about 61% " <>
         "of f32 inputs and differ by up to 3 ulp on the rest (here 1.3694695 and " <>
         "1.3694694 from the same u)"},
      {"Nx.Random.normal/4", 3, "the same erf_inv ulps, in complex samples"},
      {"Nx.Random.normal/4", 4,
       "the same erf_inv ulps, in the mean of 1000 samples (9.700222 and 9.700221)"},
      {"Nx.Random.multivariate_normal/4", 2,
       "the same erf_inv ulps: a sample is mean + l·z for normal samples z (l, the " <>
         "Cholesky factor of the identity covariance, is the identity)"},
      {"Nx.Random.multivariate_normal/4", 4, "the same, with shape {3, 2}"}
    ]
  }

  # On the GPU (ExMLX.default_device() == :gpu, MLX's CUDA build), measured
  # on an H100 (bench/gpu/README.md), besides the ones above:
  @gpu_f64_reason "uses f64, which MLX computes on the CPU only: on :gpu it is an error " <>
                    "({:f, 64} is not supported on the gpu device ...), never a narrowed result"

  # Functions of one tensor whose first two doctests are of f64 tensors.
  @gpu_f64_unary ~w(acos acosh asin asinh atan atanh cbrt cos cosh erf erfc exp expm1 log) ++
                   ~w(rsqrt sigmoid sin sinh sqrt tan tanh)

  @gpu_exclusions %{
    Nx =>
      [
        {"Nx.all_close/3", [10, 11], @gpu_f64_reason},
        {"Nx.as_type/2", [5, 8, 9], @gpu_f64_reason},
        {"Nx.atan2/2", 4, @gpu_f64_reason},
        {"Nx.from_binary/3", 2, @gpu_f64_reason},
        {"Nx.iota/2", 6, @gpu_f64_reason},
        {"Nx.log1p/1", 1, @gpu_f64_reason},
        {"Nx.tensor/2", 14, @gpu_f64_reason},
        {"Nx.window_max/3", 3, @gpu_f64_reason},
        {"Nx.window_min/3", 3, @gpu_f64_reason},
        {"Nx.atan2/2", [1, 2, 3],
         "CUDA's atan2f: 1 ulp from the correctly rounded value Nx documents (0.46364763 for 0.4636476)"},
        {"Nx.logsumexp/2", [5, 6, 7, 8, 9], "CUDA's expf/logf: 1 ulp (5.142932 for 5.1429315)"},
        {"Nx.phase/1", [1, 3],
         "phase is atan2(im, re): CUDA's atan2f, 1-2 ulp (1.1071486 for 1.1071488)"}
      ] ++ for(function <- @gpu_f64_unary, do: {"Nx.#{function}/1", [1, 2], @gpu_f64_reason}),
    Nx.LinAlg => [
      {"Nx.LinAlg.solve/2", 2, @gpu_f64_reason},
      {"Nx.LinAlg.triangular_solve/3", [2, 6, 7, 16, 17], @gpu_f64_reason},
      {"Nx.LinAlg.cholesky/1", 3,
       "1 ulp in one element (1.5877134 for 1.5877135): the trailing update runs in MLX's CUDA f32 kernels"}
    ],
    Nx.Random => [
      {"Nx.Random.gumbel/2", 2,
       "a Gumbel sample is -log(-log(u)): CUDA's logf, 1 ulp (0.6247939 for 0.6247938)"}
    ]
  }

  @doc """
  `{test name, reason}` of each excluded doctest of `module`: on `device`
  (the default device by default), and with `device: :all` every one listed.
  A listed doctest that the running Nx does not have gets a name no test has
  (`"doctest Nx.erf_inv/1 (no doctest 3 of 2)"`).
  """
  def for_module(module, device \\ ExMLX.default_device()) do
    cpu = Map.fetch!(@exclusions, module)
    gpu = Map.get(@gpu_exclusions, module, [])

    listed =
      case device do
        :gpu -> cpu ++ gpu
        :all -> cpu ++ gpu
        _ -> cpu
      end

    names = doctest_names(module)

    for {function, ranks, reason} <- listed, rank <- List.wrap(ranks) do
      of_function = Map.get(names, function, [])

      name =
        Enum.at(of_function, rank - 1) ||
          "#{function} (no doctest #{rank} of #{length(of_function)})"

      {"doctest " <> name, reason}
    end
  end

  @doc "ExUnit's exclusion filters for those of the default device."
  def filters do
    for module <- Map.keys(@exclusions),
        {name, _reason} <- for_module(module),
        do: {:test, name}
  end

  # The names of `module`'s doctests as ExUnit gives them, by function, in
  # order (computed once: reading a module's doctests parses its docs).
  defp doctest_names(module) do
    key = {__MODULE__, module}

    with nil <- :persistent_term.get(key, nil) do
      names =
        module
        |> ExUnit.DocTest.__doctests__([])
        |> Enum.map(&elem(&1, 0))
        |> Enum.group_by(&(&1 |> String.split(" (") |> hd()))

      :persistent_term.put(key, names)
      names
    end
  end
end
