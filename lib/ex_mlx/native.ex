defmodule ExMLX.Native do
  @moduledoc false
  # Every NIF of ExMLX is declared here and nowhere else.
  #
  # Asynchronous NIFs take a `tag` first. With a fresh reference as the tag they
  # check their arguments and queue the work on the device's worker thread; if
  # the worker finishes within a short wait the NIF returns `{:ok, value}` or
  # `{:error, {kind, message}}` itself, otherwise it returns `:ok` and the result
  # arrives as the message `{tag, {:ok, value} | {:error, {kind, message}}}`.
  # With `{:deferred, ...}` as the tag, a tensor-producing NIF returns
  # `{:deferred, tensor, device}` at once. `ExMLX.Call` handles every case
  # (native/ex_mlx/src/reply.rs has the details).
  #
  # If the library is missing or fails to load, the module still loads and every
  # NIF raises an `ExMLX.Error` that names the path tried.

  @on_load :load_nif

  @nif_env "EX_MLX_NIF_PATH"

  # Never raises: a module whose @on_load fails is not loaded at all, and every
  # caller would then see `:undef` instead of the reason. A failure is recorded
  # and each stub reports it.
  @doc false
  def load_nif do
    load_info =
      {choose_tf32(), Application.get_env(:ex_mlx, :tune_malloc, true) != false,
       choose_cpu_kernels()}

    case nif_path() do
      {:ok, path} ->
        case :erlang.load_nif(path, load_info) do
          :ok ->
            :persistent_term.erase({__MODULE__, :load_error})
            :ok

          {:error, {reason, text}} ->
            record_load_error(path, reason, to_string(text))
        end

      {:error, path, reason, text} ->
        record_load_error(path, reason, text)
    end
  end

  defp record_load_error(path, reason, text) do
    :persistent_term.put({__MODULE__, :load_error}, {path, reason, text})
    :ok
  end

  @doc false
  # The library's path without its extension (`:erlang.load_nif/2` adds it):
  # `$EX_MLX_NIF_PATH` if set, else `native/libex_mlx` in ex_mlx's priv folder.
  # `:code.priv_dir/1` finds that folder only when the code sits in a folder
  # named `ex_mlx` or `ex_mlx-VSN` (Mix's _build, a release); otherwise (an
  # escript, a bare `ebin` folder) the priv folder beside this module's `ebin`
  # is tried.
  def nif_path do
    nif_path(System.get_env(@nif_env), :code.priv_dir(:ex_mlx), :code.which(__MODULE__))
  end

  @doc false
  def nif_path(env, priv_dir, beam)

  def nif_path(env, _priv_dir, _beam) when is_binary(env) and env != "" do
    {:ok, env |> Path.expand() |> Path.rootname(".so") |> String.to_charlist()}
  end

  def nif_path(_env, priv_dir, _beam) when is_list(priv_dir) do
    {:ok, :filename.join(priv_dir, ~c"native/libex_mlx")}
  end

  def nif_path(_env, {:error, _}, beam) when is_list(beam) do
    priv = beam |> :filename.dirname() |> :filename.dirname() |> :filename.join(~c"priv")
    {:ok, :filename.join(priv, ~c"native/libex_mlx")}
  end

  def nif_path(_env, {:error, reason}, beam) do
    {:error, ~c"native/libex_mlx", :no_priv_dir,
     "ex_mlx's priv folder was not found (:code.priv_dir(:ex_mlx) returned " <>
       "{:error, #{inspect(reason)}} and ExMLX.Native was not loaded from a file: " <>
       "#{inspect(beam)}); set #{@nif_env} to the library's path"}
  end

  # MLX runs float32 (and, on CUDA, complex64) matrix products in TF32 on
  # GPUs that have it unless MLX_ENABLE_TF32 is "0", which it reads once, at
  # the first such product (docs/gpu.md). Nx's f32 dot is an f32 dot: ExMLX
  # turns TF32 off before MLX runs anything, unless the user chose otherwise
  # (the variable already set, or `config :ex_mlx, tf32: true`). The
  # library's load callback sets the variable where MLX reads it
  # (native/ex_mlx/src/lib.rs); it is set here too, for ExMLX.tf32?/0.
  defp choose_tf32 do
    case System.get_env("MLX_ENABLE_TF32") do
      unset when unset in [nil, ""] ->
        tf32? = Application.get_env(:ex_mlx, :tf32, false) == true
        System.put_env("MLX_ENABLE_TF32", if(tf32?, do: "1", else: "0"))
        tf32?

      value ->
        value != "0"
    end
  end

  # ExMLX's own CPU kernels (docs/numerics.md): on unless
  # `EX_MLX_CPU_KERNELS` is "false" or "0", or, where the variable is unset,
  # `config :ex_mlx, cpu_kernels: false`.
  defp choose_cpu_kernels do
    case System.get_env("EX_MLX_CPU_KERNELS") do
      unset when unset in [nil, ""] -> Application.get_env(:ex_mlx, :cpu_kernels, true) != false
      value -> String.downcase(value) not in ["false", "0"]
    end
  end

  @doc false
  def load_error, do: :persistent_term.get({__MODULE__, :load_error}, nil)

  # Every stub raises through :erlang.nif_error/1 with an ExMLX.Error as the
  # reason, so callers rescue that error. The condition is opaque to the type
  # checker (Elixir 1.18+), so it takes a stub's result as dynamic (like the
  # NIF that replaces it) rather than as "never returns"; it is always true.
  defp not_loaded do
    if :persistent_term.get({__MODULE__, :stubs_raise}, true),
      do: :erlang.nif_error(not_loaded_error()),
      else: :persistent_term.get({__MODULE__, :stubs_raise})
  end

  @doc false
  def not_loaded_error do
    {path, reason, text} = load_error() || {nif_path_for_message(), :unknown, ""}

    %ExMLX.Error{
      kind: :not_loaded,
      message:
        "the ExMLX native library was not loaded from #{path}.so (#{reason}: #{text}). " <>
          "Build it with bin/setup (or mix compile), or set #{@nif_env} to its path." <>
          cuda_hint(text)
    }
  end

  # A library built for CUDA (ExMLX.Build.gpu_runtime/0) on a machine
  # without NVIDIA's driver
  defp cuda_hint(text) do
    if String.contains?(text, "libcuda.so"),
      do:
        " NVIDIA's driver (libcuda.so.1) was not found: on a machine without an NVIDIA GPU, " <>
          "build for the CPU (EXMLX_TARGET=cpu mix compile).",
      else: ""
  end

  defp nif_path_for_message do
    case nif_path() do
      {:ok, path} -> path
      {:error, path, _, _} -> path
    end
  end

  # Library
  def mlx_version, do: not_loaded()
  def cpu_kernels_enabled, do: not_loaded()

  # Every op of the op table (native/ex_mlx/core/src/ops/table.rs): `name`
  # an atom, `inputs` a list of tensors, `params` a list in the table's
  # order. ExMLX.Op calls it.
  def op(_tag, _name, _inputs, _params), do: not_loaded()
  # The op table: [{name, family, inputs, params, results, flags}].
  def op_table, do: not_loaded()
  # Programs of op-table instructions (ExMLX.Compiler): checked and kept by
  # program_new, run in one call on the device's worker by program_run.
  def program_new(_device, _inputs, _constants, _instructions, _outputs, _fuse), do: not_loaded()
  def program_run(_tag, _program, _inputs), do: not_loaded()
  # The outputs at once, pending (cast to `types`); the worker fills them.
  def program_start(_program, _inputs, _types), do: not_loaded()
  # A program read from its bytes (docs/program-format.md; dirty scheduler).
  def program_load(_tag, _bytes), do: not_loaded()
  # `[steps, building_ns, waiting_ns, reads, queueing_ns, compiled_ns]` of
  # programs' loops so far: a profile (ex_mlx_core::program::loop_times).
  def program_loop_times, do: not_loaded()
  # `[calls, building_ns, queueing_ns, waiting_ns]` of program calls the
  # worker ran so far: a profile (native/ex_mlx/src/program.rs, RUN_TIMES).
  def program_run_times, do: not_loaded()

  # For ExMLX's own tests, in the test environment's build only (the cargo
  # feature test-hooks): a deliberate panic (:nif or :worker), a hold
  # on the CPU worker until release_worker_for_test/0, when calling threads
  # run a worker's small work (:when_crowded, :always, :never), and how many
  # times they did.
  def panic_for_test(_tag, _where), do: test_hook()
  def hold_worker_for_test(_tag), do: test_hook()
  def release_worker_for_test, do: test_hook()
  def set_callers_run_for_test(_mode), do: test_hook()
  def runs_on_caller_for_test, do: test_hook()

  # For bench/: seconds of each of `reps` plain Rust copies of `binary`
  # (dirty scheduler; ArgumentError past 1 GiB or 1000 reps).
  def memcpy_seconds(_binary, _reps), do: not_loaded()
  # For bench/: seconds of each of `reps` n-add chains of f32 arrays of
  # `elements` elements (0: 0-d) built and evaluated on a device's worker
  # in Rust (replies to `tag`).
  def worker_chain_seconds(_tag, _device, _n, _elements, _reps), do: not_loaded()

  # Tensor queries (synchronous), evaluation, one element
  def tensor_info(_tensor), do: not_loaded()
  def tensor_size(_tensor), do: not_loaded()
  def tensor_await(_tag, _tensor), do: not_loaded()
  def deallocate(_tensor), do: not_loaded()
  def eval(_tag, _tensor), do: not_loaded()
  def item(_tag, _tensor), do: not_loaded()

  # Devices
  def transfer(_tag, _tensor, _device), do: not_loaded()
  def device_available(_device), do: not_loaded()
  # Whether the device's workers evaluate ahead of reads (before the call);
  # true/false sets it, nil leaves it.
  def device_evaluate_ahead(_device, _setting), do: not_loaded()
  # Streams (ExMLX.Stream): a new one on a device's kind, {kind, n};
  # waiting for what was queued on one.
  def stream_new(_device), do: not_loaded()
  def stream_synchronize(_tag, _device), do: not_loaded()

  # Data in and out
  def from_binary(_tag, _binary, _type, _shape, _device), do: not_loaded()
  # Bytes of binaries given to from_binary/5 that no worker has copied yet.
  def from_binary_waiting_bytes, do: not_loaded()
  # CPU tensors made on the calling thread (no worker): up to 64 KB of data
  # on a normal scheduler, any size on a dirty one (ExMLX.Call.copy_path/2).
  def from_binary_at_once(_binary, _type, _shape), do: not_loaded()
  def from_binary_at_once_dirty(_binary, _type, _shape), do: not_loaded()
  def to_binary(_tag, _tensor), do: not_loaded()
  def data_pointer(_tag, _tensor), do: not_loaded()

  # Memory (synchronous)
  def memory_stats, do: not_loaded()
  def memory_reset_peak, do: not_loaded()
  def memory_clear_cache, do: not_loaded()
  def memory_set_limit(_which, _bytes), do: not_loaded()
  def memory_mlx_cache_limit, do: not_loaded()
  def device_info(_device), do: not_loaded()

  # Wire format
  def wire_encode(_tag, _tensor), do: not_loaded()
  def wire_decode(_tag, _frame, _device), do: not_loaded()
  def wire_encode_dirty(_tensor), do: not_loaded()
  def wire_decode_at_once(_frame), do: not_loaded()
  def wire_decode_at_once_dirty(_frame), do: not_loaded()
  def bundle_header(_tensors, _metadata), do: not_loaded()
  def bundle_header_length(_prefix, _total), do: not_loaded()
  def bundle_parse_header(_json, _data_len), do: not_loaded()

  # Distributed (native/ex_mlx/src/distributed.rs). The calls that wait for
  # peers return `{:ok, ticket}` and reply `{tag, result}` from the
  # communication thread; dist_abandon/2 takes a reply away once the caller
  # stops waiting (true: no message will come). `group` is a group
  # reference or nil (the group of one).
  def dist_available(_backend), do: not_loaded()
  def dist_init(_tag, _backend, _strict), do: not_loaded()
  # MLX_HOSTFILE or MLX_RANK set where MLX reads them (not os:putenv's copy)
  def dist_setenv(_name, _value), do: not_loaded()
  def dist_split(_tag, _group, _color, _key), do: not_loaded()
  def dist_collective(_tag, _op, _tensor, _group), do: not_loaded()
  def dist_send(_tag, _tensor, _dst, _group), do: not_loaded()
  def dist_recv(_tag, _shape, _type, _src, _group, _device), do: not_loaded()
  def dist_recv_like(_tag, _tensor, _src, _group), do: not_loaded()
  def dist_abandon(_ticket, _reason), do: not_loaded()

  # A test hook's stub: the library is loaded, but built without the
  # test-hooks feature (any environment but `test`).
  defp test_hook do
    if load_error() do
      not_loaded()
    else
      :erlang.nif_error(%ExMLX.Error{
        kind: :not_loaded,
        message:
          "this NIF exists only in the test environment's build of ExMLX " <>
            "(cargo feature test-hooks); run it under MIX_ENV=test"
      })
    end
  end
end
