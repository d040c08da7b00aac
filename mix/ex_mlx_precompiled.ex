defmodule ExMLX.Build.Precompiled do
  @moduledoc false
  # Precompiled NIFs, so that a user without Rust can use ExMLX: the
  # convention Explorer and tokenizers follow (rustler_precompiled). A
  # maintainer runs `mix ex_mlx.precompile` on each target: it builds the NIF,
  # packs it as `<artifact>.tar.gz` and records its SHA-256 in the checksum
  # file at the project's root (checksum-ExMLX.Native.exs). The artifacts are
  # published at a base URL. On a user's machine, the `ex_mlx_native`
  # compiler downloads the artifact for its target from that URL, checks it
  # against the checksum file and installs it — unless EXMLX_BUILD=true, or no
  # base URL is configured, or the checksum file has no entry for the target:
  # then it builds from source, as before.
  #
  # The base URL: EXMLX_PRECOMPILED_URL, else `precompiled_url` in the
  # project's `:ex_mlx` config (mix.exs). Downloads are cached in
  # `_build/ex_mlx-precompiled/` (ExMLX.Build.precompiled_dir/0). Loaded by
  # mix.exs before anything is compiled, like ExMLX.Build.

  @checksum_file "checksum-ExMLX.Native.exs"
  @lib_name "ex_mlx"
  # the one file an artifact holds
  @entry ~c"libex_mlx.so"

  @doc "The checksum file's path in the project."
  def checksum_path(root), do: Path.join(root, @checksum_file)

  @doc """
  This machine's target, in Rust's spelling (what the NIF is built for):
  `x86_64-unknown-linux-gnu`, `aarch64-apple-darwin`, …
  """
  def target do
    arch = :erlang.system_info(:system_architecture) |> List.to_string()
    [cpu | _] = String.split(arch, "-")
    cpu = if cpu == "arm", do: "aarch64", else: cpu

    case :os.type() do
      {:unix, :darwin} -> "#{cpu}-apple-darwin"
      {:unix, :linux} -> "#{cpu}-unknown-linux-" <> if(arch =~ "musl", do: "musl", else: "gnu")
      {family, name} -> "#{cpu}-#{family}-#{name}"
    end
  end

  @doc "The artifact's file name for `version` (ExMLX's), `mlx` (MLX's) and `target`."
  def artifact_name(version, mlx, target \\ target()) do
    nif = :erlang.system_info(:nif_version) |> List.to_string()
    "lib#{@lib_name}-v#{version}-mlx-#{mlx}-nif-#{nif}-#{target}.so.tar.gz"
  end

  @doc """
  What to do for `artifact`: `{:download, url, sha256}`, or `{:build, reason}`
  (the reason says why the library is built from source).
  """
  def plan(artifact, checksums, base_url, env \\ System.get_env()) do
    cond do
      env["EXMLX_BUILD"] in ["1", "true"] ->
        {:build, "EXMLX_BUILD=#{env["EXMLX_BUILD"]}"}

      base_url in [nil, ""] ->
        {:build, "no precompiled NIF URL is configured"}

      not Map.has_key?(checksums, artifact) ->
        {:build, "no precompiled NIF is listed for #{artifact}"}

      true ->
        {:download, String.trim_trailing(base_url, "/") <> "/" <> artifact,
         Map.fetch!(checksums, artifact)}
    end
  end

  @doc "The checksum file's entries (`%{artifact => \"sha256:…\"}`), or `%{}`."
  def read_checksums(path) do
    if File.exists?(path) do
      {checksums, _} = Code.eval_file(path)
      checksums
    else
      %{}
    end
  end

  @doc "Adds `entries` to the checksum file at `path`."
  def write_checksums!(path, entries) do
    checksums = Map.merge(read_checksums(path), entries)
    File.write!(path, inspect(checksums, pretty: true, limit: :infinity) <> "\n")
  end

  @doc """
  Downloads `url` (cached as `cache_dir/<its name>`), checks it against
  `sha256` (`"sha256:<hex>"`) and writes the library it holds to `dest`.
  `:ok` or `{:error, message}`; a download that fails the check is deleted.
  """
  def install(url, sha256, cache_dir, dest) do
    cached = Path.join(cache_dir, Path.basename(url))

    with :ok <- (File.exists?(cached) && :ok) || download(url, cached),
         :ok <- verify(cached, sha256),
         {:ok, library} <- unpack(cached) do
      File.mkdir_p!(Path.dirname(dest))
      tmp = dest <> ".tmp"
      File.write!(tmp, library)
      File.rename!(tmp, dest)
    end
  end

  @doc "Packs `library` as `out_dir/<artifact>`; `{path, \"sha256:<hex>\"}`."
  def pack!(library, artifact, out_dir) do
    File.mkdir_p!(out_dir)
    path = Path.join(out_dir, artifact)

    :ok =
      :erl_tar.create(String.to_charlist(path), [{@entry, File.read!(library)}], [:compressed])

    {path, sha256(File.read!(path))}
  end

  defp download(url, dest) do
    https? = String.starts_with?(url, "https:")
    apps = [:inets] ++ if(https?, do: [:crypto, :public_key, :ssl], else: [])
    # (Mix on Elixir 1.15 and later keeps OTP applications a project does not
    # list off the code path)
    if function_exported?(Mix, :ensure_application!, 1),
      do: Enum.each(apps, &Mix.ensure_application!/1)

    Enum.each(apps, &({:ok, _} = Application.ensure_all_started(&1)))
    File.mkdir_p!(Path.dirname(dest))
    request = {String.to_charlist(url), []}
    options = [body_format: :binary]

    http =
      [timeout: 120_000, connect_timeout: 15_000] ++
        if https?,
          do: [
            ssl: [
              verify: :verify_peer,
              cacerts: :public_key.cacerts_get(),
              customize_hostname_check: [
                match_fun: :public_key.pkix_verify_hostname_match_fun(:https)
              ]
            ]
          ],
          else: []

    case :httpc.request(:get, request, http, options) do
      {:ok, {{_, 200, _}, _headers, body}} ->
        File.write!(dest, body)

      {:ok, {{_, status, _}, _headers, _body}} ->
        {:error, "downloading #{url} failed: HTTP #{status}#{build_hint()}"}

      {:error, reason} ->
        {:error, "downloading #{url} failed: #{inspect(reason)}#{build_hint()}"}
    end
  end

  defp verify(path, expected) do
    actual = sha256(File.read!(path))

    if actual == expected do
      :ok
    else
      File.rm(path)

      {:error,
       "#{Path.basename(path)} does not match the checksum file: expected #{expected}, " <>
         "got #{actual}; the download was deleted#{build_hint()}"}
    end
  end

  defp unpack(path) do
    case :erl_tar.extract(String.to_charlist(path), [:compressed, :memory, files: [@entry]]) do
      {:ok, [{@entry, library}]} -> {:ok, library}
      {:ok, _} -> {:error, "#{Path.basename(path)} does not hold #{@entry}"}
      {:error, reason} -> {:error, "could not unpack #{Path.basename(path)}: #{inspect(reason)}"}
    end
  end

  defp sha256(bytes), do: "sha256:" <> Base.encode16(:crypto.hash(:sha256, bytes), case: :lower)

  defp build_hint, do: " (set EXMLX_BUILD=true to build the NIF from source instead)"
end
