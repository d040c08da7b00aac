defmodule ExMLX.Build do
  @moduledoc false
  # Build support shared by the `ex_mlx_native` Mix compiler and the
  # `ex_mlx.cargo` task: where the MLX runtime is, how to provision it on Linux,
  # and the environment cargo needs to build the NIF against it.
  #
  # This file lives outside lib/ because mix.exs loads it before anything is
  # compiled (a compiler cannot be compiled by the compilers it precedes).

  # The MLX releases ExMLX builds against (mlx-c 0.7.0's ABI); the first is
  # the default, `EX_MLX_MLX_VERSION` names another.
  @supported_mlx_versions ["0.32.2", "0.32.4"]
  # The CPU wheel is `mlx-cpu`; MLX's CUDA build (CUDA 13) is `mlx-cuda-13`,
  # whose dependencies are NVIDIA's runtime wheels: cuBLAS, cuFFT, NVRTC,
  # cudart, cuDNN, NCCL, nvJitLink.
  # PyTorch beside bin/bench's GPU rows (integration/bin/setup installs the same)
  @bench_torch "torch==2.15.0"

  @crate_rel "native/ex_mlx"
  @lib_name "ex_mlx"

  # Where Debian (and derivatives) put the threaded OpenBLAS.
  @openblas_dirs [
    "/usr/lib/x86_64-linux-gnu/openblas-pthread",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread",
    "/usr/lib64/openblas-pthreads",
    "/usr/lib64"
  ]

  @doc """
  The MLX release to build against: `EX_MLX_MLX_VERSION` when set (one of
  `supported_mlx_versions/0`), else the first supported one.
  """
  def mlx_version do
    case System.get_env("EX_MLX_MLX_VERSION") do
      empty when empty in [nil, ""] ->
        hd(@supported_mlx_versions)

      version ->
        if version in @supported_mlx_versions do
          version
        else
          Mix.raise(
            "EX_MLX_MLX_VERSION=#{version} is not a supported MLX release " <>
              "(supported: #{Enum.join(@supported_mlx_versions, ", ")})"
          )
        end
    end
  end

  @doc "The MLX releases ExMLX builds against."
  def supported_mlx_versions, do: @supported_mlx_versions

  @doc "Absolute path of the project root (the folder of mix.exs)."
  def root, do: Path.expand("..", __DIR__)

  def crate_dir, do: Path.join(root(), @crate_rel)

  @doc """
  Cargo target folder, shared by every Mix env so the crate builds once.
  `EX_MLX_CARGO_TARGET_DIR` overrides it (to share one build between build roots).
  """
  def target_dir do
    case System.get_env("EX_MLX_CARGO_TARGET_DIR") do
      dir when is_binary(dir) and dir != "" -> Path.expand(dir)
      _ -> Path.join([Path.dirname(Mix.Project.build_path()), "native", "target"])
    end
  end

  @doc """
  Where the built library goes: `priv/native` inside the application's folder in
  `_build` (`Mix.Project.app_path/0`), which is what `:code.priv_dir(:ex_mlx)`
  returns at run time. Nothing is written into the source tree, so the library is
  found on the first run and ExMLX builds the same way as a dependency.
  """
  def priv_native_dir, do: Path.join([Mix.Project.app_path(), "priv", "native"])

  def macos?, do: match?({:unix, :darwin}, :os.type())

  @doc "File name of the built library as cargo writes it."
  def cargo_lib_file do
    if macos?(), do: "lib#{@lib_name}.dylib", else: "lib#{@lib_name}.so"
  end

  @doc "File name of the library in priv/native (`:erlang.load_nif/2` adds `.so`)."
  def priv_lib_file, do: "lib#{@lib_name}.so"

  # ---------------------------------------------------------------------------
  # MLX runtime
  # ---------------------------------------------------------------------------

  @doc """
  Returns `{:ok, prefix}` (a folder with include/, lib/libmlx.so,
  share/cmake/MLX), `{:ok, :upstream}` on macOS, or `{:error, message}`.

  Order: `MLX_PREFIX` if set; macOS uses mlx-sys's own build; otherwise the
  pinned `mlx-cpu` wheel, provisioned once into `_build/mlx-runtime/`.
  """
  def mlx_runtime do
    case System.get_env("MLX_PREFIX") do
      prefix when is_binary(prefix) and prefix != "" -> check_prefix(Path.expand(prefix))
      _ -> if macos?(), do: {:ok, :upstream}, else: provision_wheel()
    end
  end

  defp check_prefix(prefix) do
    required = [
      "include/mlx/mlx.h",
      "lib/" <> if(macos?(), do: "libmlx.dylib", else: "libmlx.so"),
      "share/cmake/MLX/MLXConfig.cmake"
    ]

    case Enum.reject(required, &File.exists?(Path.join(prefix, &1))) do
      [] ->
        {:ok, prefix}

      missing ->
        {:error,
         "MLX_PREFIX=#{prefix} is not an MLX #{mlx_version()} install: missing " <>
           Enum.join(missing, ", ")}
    end
  end

  @doc "Where an MLX runtime (`mlx-cpu`, `mlx-cuda-13`) is provisioned."
  def runtime_dir(flavour \\ "mlx-cpu") do
    Path.join([
      Path.dirname(Mix.Project.build_path()),
      "mlx-runtime",
      "#{flavour}-#{mlx_version()}"
    ])
  end

  defp provision_wheel,
    do: provision(["mlx-cpu==#{mlx_version()}"], runtime_dir(), ["--no-deps"])

  # Downloads `requirement` (with its dependencies unless `pip_flags` says
  # --no-deps) into `dir`, unpacked as pip would install them (one
  # site-packages-like folder: MLX's CUDA libmlx finds NVIDIA's libraries
  # there by its own run-time path, `$ORIGIN/../../nvidia/...`), relinks
  # libmlx's BLAS to OpenBLAS and checks the result; once.
  defp provision(requirements, dir, pip_flags) do
    prefix = Path.join(dir, "mlx")
    requirement = Enum.join(requirements, " ")

    if File.exists?(Path.join(dir, ".ready")) do
      {:ok, prefix}
    else
      Mix.shell().info("==> ex_mlx: provisioning the MLX runtime (#{requirement}) into #{dir}")

      with :ok <- download_wheels(requirements, dir, pip_flags),
           :ok <- relink_blas(Path.join(prefix, "lib/libmlx.so")),
           {:ok, _} <- check_prefix(prefix) do
        File.write!(Path.join(dir, ".ready"), requirement <> "\n")
        {:ok, prefix}
      end
    end
  end

  defp download_wheels(requirements, dir, pip_flags) do
    requirement = Enum.join(requirements, " ")
    download = dir <> ".download"
    File.rm_rf!(download)
    File.rm_rf!(dir)
    File.mkdir_p!(download)

    python = System.find_executable("python3") || System.find_executable("python")

    args =
      ~w(-m pip download --only-binary=:all: --disable-pip-version-check) ++
        pip_flags ++ ["-d", download | requirements]

    cond do
      python == nil ->
        {:error,
         "python3 with pip is needed to fetch the MLX runtime (#{requirement}); run bin/setup"}

      true ->
        case System.cmd(python, args, stderr_to_stdout: true) do
          {_, 0} ->
            File.mkdir_p!(dir)
            wheels = Path.wildcard(Path.join(download, "*.whl"))

            result =
              Enum.reduce_while(wheels, :ok, fn wheel, :ok ->
                case :zip.unzip(String.to_charlist(wheel), cwd: String.to_charlist(dir)) do
                  {:ok, _files} ->
                    {:cont, :ok}

                  {:error, reason} ->
                    {:halt, {:error, "could not unpack #{wheel}: #{inspect(reason)}"}}
                end
              end)

            if result == :ok, do: File.rm_rf!(download)
            result

          {out, status} ->
            {:error,
             "`#{python} -m pip download #{requirement}` failed (exit #{status}):\n#{out}\n" <>
               "Set MLX_PREFIX to an MLX #{mlx_version()} install to skip the download."}
        end
    end
  end

  # ---------------------------------------------------------------------------
  # The GPU runtime (Linux + NVIDIA)
  # ---------------------------------------------------------------------------

  @doc """
  What the NIF runs on: `:cuda` or `:cpu`, from `EXMLX_TARGET` (`cuda` or
  `cpu`) or, unset, `:cuda` on Linux where `nvidia-smi -L` lists a GPU.
  (macOS: `:cpu` here; its GPU, Metal, comes with mlx-sys's own build.)
  """
  def target do
    case System.get_env("EXMLX_TARGET") do
      t when t in [nil, ""] -> if nvidia_gpu?(), do: :cuda, else: :cpu
      "cuda" -> :cuda
      "cpu" -> :cpu
      other -> Mix.raise("EXMLX_TARGET must be cuda or cpu, got: #{inspect(other)}")
    end
  end

  defp nvidia_gpu? do
    with false <- macos?(),
         smi when is_binary(smi) <- System.find_executable("nvidia-smi"),
         {out, 0} <- System.cmd(smi, ["-L"], stderr_to_stdout: true) do
      String.contains?(out, "GPU")
    else
      _ -> false
    end
  end

  @doc """
  `{:ok, lib_dir}`: the folder of MLX's CUDA libmlx, provisioned once into
  `_build/mlx-runtime/` with NVIDIA's runtime wheels beside it, when the
  target is CUDA and `MLX_PREFIX` is not set (an `MLX_PREFIX` is used as it
  is); `{:ok, nil}` otherwise; `{:error, message}`.

  The NIF is built against the CPU runtime (the same MLX version and
  headers, no CUDA toolkit needed) and its run-time path then names this
  folder, so it loads the CUDA libmlx in its place.
  """
  def gpu_runtime do
    cond do
      System.get_env("MLX_PREFIX") not in [nil, ""] ->
        {:ok, nil}

      target() == :cuda ->
        with {:ok, prefix} <-
               provision(cuda_requirements(), runtime_dir("mlx-cuda-13"), []),
             do: {:ok, Path.join(prefix, "lib")}

      true ->
        {:ok, nil}
    end
  end

  # MLX's CUDA wheel and its dependencies, and CUDA's crt/ headers: MLX
  # compiles its quantized-matmul kernels with NVRTC at their first use, and
  # their sources include crt/mma.h, which none of mlx-cuda-13's
  # dependencies holds (docs/gpu.md).
  defp cuda_requirements, do: ["mlx-cuda-13==#{mlx_version()}", "nvidia-cuda-crt==13.*"]

  # The wheel's libmlx.so links a bundled reference BLAS/LAPACK, far slower
  # at matmul than the system's threaded OpenBLAS; this points it at
  # OpenBLAS (native/ex_mlx/linux/README.md; bin/bench's matmul rows compare
  # the result with numpy).
  def relink_blas(libmlx) do
    patchelf = System.find_executable("patchelf")
    openblas = Enum.find(@openblas_dirs, &File.exists?(Path.join(&1, "libopenblas.so.0")))

    cond do
      patchelf == nil ->
        {:error, "patchelf is needed to relink MLX to OpenBLAS; run bin/setup"}

      openblas == nil ->
        {:error,
         "OpenBLAS (libopenblas.so.0) was not found in #{Enum.join(@openblas_dirs, ", ")}; " <>
           "install it (Debian: apt-get install libopenblas0-pthread) or run bin/setup"}

      true ->
        {needed, 0} = System.cmd(patchelf, ["--print-needed", libmlx])
        needed = String.split(needed, "\n", trim: true)
        blas = Enum.filter(needed, &String.starts_with?(&1, "libblas-"))
        lapack = Enum.filter(needed, &String.starts_with?(&1, "liblapack-"))
        # (OpenBLAS first; the wheel's own entries, NVIDIA's folders for the
        # CUDA build, after it)
        {rpath, 0} = System.cmd(patchelf, ["--print-rpath", libmlx])
        rpath = rpath |> String.trim() |> String.split(":", trim: true) |> List.delete(openblas)

        # (two runs: patchelf 0.14, Debian 12's, given both edits at once
        # writes the CUDA libmlx's long run-time path over with a library name)
        needed_args =
          Enum.flat_map(blas, &["--replace-needed", &1, "libopenblas.so.0"]) ++
            Enum.flat_map(lapack, &["--remove-needed", &1])

        with :ok <-
               patchelf(patchelf, ["--set-rpath", Enum.join([openblas | rpath], ":"), libmlx]),
             do: if(needed_args == [], do: :ok, else: patchelf(patchelf, needed_args ++ [libmlx]))
    end
  end

  defp patchelf(patchelf, args) do
    case System.cmd(patchelf, args, stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, status} -> {:error, "patchelf failed (exit #{status}): #{out}"}
    end
  end

  @doc """
  Where precompiled NIFs go: the artifacts `mix ex_mlx.precompile` packs,
  and the downloads the compiler caches.
  """
  def precompiled_dir, do: Path.join(Path.dirname(Mix.Project.build_path()), "ex_mlx-precompiled")

  @doc """
  Points a library's run-time search path at `lib_dir`: a precompiled NIF
  at install (it was linked against the MLX runtime of the machine that
  built it), or a NIF built here that runs on the CUDA runtime.
  """
  def link_runtime(library, lib_dir) do
    case System.find_executable("patchelf") do
      nil -> {:error, "patchelf is needed to link the NIF to MLX's runtime; run bin/setup"}
      patchelf -> patchelf(patchelf, ["--set-rpath", lib_dir, library])
    end
  end

  @doc """
  A folder with Python's `mlx` and `mlx-cpu` (both of `mlx_version/0`, relinked to
  OpenBLAS like ExMLX's runtime) for the benchmarks' reference; installed once.
  """
  def bench_python do
    requirements = ["mlx==#{mlx_version()}", "mlx-cpu==#{mlx_version()}"]

    pip_once("bench-python", requirements, ["--no-deps"], fn dir ->
      relink_blas(Path.join(dir, "mlx/lib/libmlx.so"))
    end)
  end

  @doc """
  Python mlx for bin/bench's GPU rows, on the same CUDA libmlx as ExMLX's
  (`_build/bench-python-gpu`, made once): the `mlx` wheel's bindings, with
  `mlx/lib` and `nvidia/` linked to the CUDA runtime `mix compile` provisions
  on a CUDA machine (`runtime_dir("mlx-cuda-13")`). `{:ok, dir}` (a
  PYTHONPATH) or `{:error, reason}`.
  """
  def bench_python_gpu do
    runtime = runtime_dir("mlx-cuda-13")

    if File.exists?(Path.join(runtime, ".ready")) do
      pip_once("bench-python-gpu", ["mlx==#{mlx_version()}"], ["--no-deps"], fn dir ->
        File.ln_s!(Path.join(runtime, "mlx/lib"), Path.join(dir, "mlx/lib"))
        File.ln_s!(Path.join(runtime, "nvidia"), Path.join(dir, "nvidia"))
      end)
    else
      {:error,
       "no CUDA runtime in #{runtime} (bin/setup provisions it where nvidia-smi lists a GPU)"}
    end
  end

  @doc """
  PyTorch for bin/bench's GPU rows (`_build/bench-torch`, installed once
  with pip and its CUDA dependencies, a few GB): `{:ok, dir}` (a PYTHONPATH)
  or `{:error, reason}`. The version is the integration project's.
  """
  def bench_torch do
    pip_once("bench-torch", [@bench_torch], [], fn _dir -> :ok end)
  end

  @doc """
  mlx-lm (of MLX's version, without its dependencies: it runs on the
  `mlx` of `bench_python/0` and the integration project's transformers)
  for the language-model benchmark (integration/bench/llm.exs),
  `_build/bench-mlx-lm`, installed once: `{:ok, dir}` or `{:error, reason}`.
  """
  def bench_mlx_lm do
    pip_once("bench-mlx-lm", ["mlx-lm==#{mlx_version()}"], ["--no-deps"], fn _dir -> :ok end)
  end

  # Installs `requirements` with pip into `_build/<name>` once (a `.ready`
  # file marks it done), then `finish.(dir)` completes the folder (`:ok` or
  # `{:error, reason}`); `{:ok, dir}` or `{:error, reason}`.
  defp pip_once(name, requirements, pip_flags, finish) do
    dir = Path.join(Path.dirname(Mix.Project.build_path()), name)
    ready = Path.join(dir, ".ready")

    if File.exists?(ready) do
      {:ok, dir}
    else
      File.rm_rf!(dir)
      python = System.find_executable("python3") || "python3"
      Mix.shell().info("==> installing #{Enum.join(requirements, ", ")} into #{dir}")

      args =
        ~w(-m pip install --quiet --disable-pip-version-check) ++
          pip_flags ++ ["--target", dir | requirements]

      with {_, 0} <- System.cmd(python, args, stderr_to_stdout: true),
           :ok <- finish.(dir) do
        File.write!(ready, Enum.join(requirements, "\n") <> "\n")
        {:ok, dir}
      else
        {out, status} when is_integer(status) ->
          {:error, "pip install failed (#{status}): #{out}"}

        {:error, message} ->
          {:error, message}
      end
    end
  end

  # ---------------------------------------------------------------------------
  # Cargo
  # ---------------------------------------------------------------------------

  @doc "Environment for cargo builds against `prefix` (see native/ex_mlx/linux)."
  def cargo_env(:upstream), do: [{"CARGO_TARGET_DIR", target_dir()}]

  def cargo_env(prefix) do
    linux = Path.join(crate_dir(), "linux")
    compat = Path.join(linux, "compat.h")

    [
      {"CARGO_TARGET_DIR", target_dir()},
      {"EX_MLX_LIB_DIR", Path.join(prefix, "lib")},
      {"EX_MLX_CMAKE_DIR", Path.join(prefix, "share/cmake/MLX")},
      {"CMAKE_TOOLCHAIN_FILE", Path.join(linux, "toolchain.cmake")},
      {"CXXFLAGS", "-include #{compat}"},
      {"BINDGEN_EXTRA_CLANG_ARGS", "-include #{compat} -I#{Path.join(prefix, "include")}"},
      {"RUSTC_WRAPPER", Path.join(linux, "rustc-wrapper")}
    ]
  end

  @doc "Runs cargo in the crate folder, streaming its output; returns the exit status."
  def cargo(args, env) do
    cargo =
      System.find_executable("cargo") ||
        Mix.raise("cargo not found: install Rust (https://rustup.rs)")

    {_, status} =
      System.cmd(cargo, args,
        cd: crate_dir(),
        env: env,
        into: IO.stream(:stdio, :line),
        stderr_to_stdout: true
      )

    status
  end

  @doc "Profile from EX_MLX_BUILD (release by default, `debug` for dev builds)."
  def profile do
    case System.get_env("EX_MLX_BUILD", "release") do
      "debug" -> :debug
      _ -> :release
    end
  end
end
