defmodule ExMLX.PrecompiledTest do
  # The precompiled-NIF path (mix/ex_mlx_precompiled.ex): artifacts packed,
  # served by an HTTP server on 127.0.0.1 started here, downloaded, checked
  # against their SHA-256 (computed here with :crypto, independently of the
  # code under test) and unpacked.
  use ExUnit.Case, async: true

  alias ExMLX.Build.Precompiled

  @moduletag :tmp_dir

  # Serves the files of `dir` over HTTP/1.0 on 127.0.0.1 (a random port);
  # 404 for anything else. Returns the base URL.
  defp serve(dir) do
    {:ok, listen} =
      :gen_tcp.listen(0, [:binary, ip: {127, 0, 0, 1}, active: false, packet: :http_bin])

    {:ok, port} = :inet.port(listen)
    server = spawn_link(fn -> accept(listen, dir) end)
    :ok = :gen_tcp.controlling_process(listen, server)
    "http://127.0.0.1:#{port}/artifacts"
  end

  defp accept(listen, dir) do
    {:ok, socket} = :gen_tcp.accept(listen)
    {:ok, {:http_request, :GET, {:abs_path, path}, _}} = :gen_tcp.recv(socket, 0)
    skip_headers(socket)
    file = Path.join(dir, Path.basename(path))

    response =
      case File.read(file) do
        {:ok, body} -> ["HTTP/1.0 200 OK\r\ncontent-length: #{byte_size(body)}\r\n\r\n", body]
        {:error, _} -> "HTTP/1.0 404 Not Found\r\ncontent-length: 0\r\n\r\n"
      end

    :ok = :inet.setopts(socket, packet: :raw)
    :gen_tcp.send(socket, response)
    :gen_tcp.close(socket)
    accept(listen, dir)
  end

  defp skip_headers(socket) do
    case :gen_tcp.recv(socket, 0) do
      {:ok, :http_eoh} -> :ok
      {:ok, {:http_header, _, _, _, _}} -> skip_headers(socket)
    end
  end

  defp sha256(bytes), do: "sha256:" <> Base.encode16(:crypto.hash(:sha256, bytes), case: :lower)

  defp packed(dir) do
    library = Path.join(dir, "built.so")
    File.write!(library, :crypto.strong_rand_bytes(4096))
    artifact = Precompiled.artifact_name("0.1.0", "0.32.2")
    {path, checksum} = Precompiled.pack!(library, artifact, Path.join(dir, "served"))
    {library, artifact, path, checksum}
  end

  test "an artifact is downloaded from 127.0.0.1, checked and unpacked", %{tmp_dir: dir} do
    {library, artifact, path, checksum} = packed(dir)
    assert checksum == sha256(File.read!(path))
    url = serve(Path.dirname(path)) <> "/" <> artifact
    dest = Path.join([dir, "priv", "libex_mlx.so"])

    assert :ok = Precompiled.install(url, checksum, Path.join(dir, "cache"), dest)
    assert File.read!(dest) == File.read!(library)
    # (cached: a second install reads the cache, not the network)
    File.rm!(dest)

    assert :ok =
             Precompiled.install(
               "http://127.0.0.1:1/none/" <> artifact,
               checksum,
               Path.join(dir, "cache"),
               dest
             )

    assert File.read!(dest) == File.read!(library)
  end

  test "a download that does not match its checksum is refused and deleted", %{tmp_dir: dir} do
    {_library, artifact, path, _checksum} = packed(dir)
    url = serve(Path.dirname(path)) <> "/" <> artifact
    wrong = sha256("something else")
    cache = Path.join(dir, "cache")

    assert {:error, message} = Precompiled.install(url, wrong, cache, Path.join(dir, "lib.so"))

    assert message ==
             "#{artifact} does not match the checksum file: expected #{wrong}, got " <>
               "#{sha256(File.read!(path))}; the download was deleted " <>
               "(set EXMLX_BUILD=true to build the NIF from source instead)"

    refute File.exists?(Path.join(cache, artifact))
    refute File.exists?(Path.join(dir, "lib.so"))
  end

  test "a missing artifact is an error naming its URL and the way out", %{tmp_dir: dir} do
    url = serve(dir) <> "/libex_mlx-missing.so.tar.gz"

    assert {:error, message} =
             Precompiled.install(
               url,
               sha256(""),
               Path.join(dir, "cache"),
               Path.join(dir, "lib.so")
             )

    assert message ==
             "downloading #{url} failed: HTTP 404 " <>
               "(set EXMLX_BUILD=true to build the NIF from source instead)"
  end

  test "plan: download only with a URL and a listed artifact, unless EXMLX_BUILD=true" do
    artifact = Precompiled.artifact_name("0.1.0", "0.32.2")
    checksums = %{artifact => "sha256:00"}
    url = "http://127.0.0.1:9/releases/v0.1.0/"

    assert Precompiled.plan(artifact, checksums, url, %{}) ==
             {:download, "http://127.0.0.1:9/releases/v0.1.0/" <> artifact, "sha256:00"}

    assert Precompiled.plan(artifact, checksums, url, %{"EXMLX_BUILD" => "true"}) ==
             {:build, "EXMLX_BUILD=true"}

    assert Precompiled.plan(artifact, checksums, nil, %{}) ==
             {:build, "no precompiled NIF URL is configured"}

    assert Precompiled.plan(artifact, %{}, url, %{}) ==
             {:build, "no precompiled NIF is listed for #{artifact}"}
  end

  test "artifact names carry ExMLX's and MLX's versions, the NIF version and the target" do
    nif = List.to_string(:erlang.system_info(:nif_version))

    assert Precompiled.artifact_name("0.1.0", "0.32.2", "x86_64-unknown-linux-gnu") ==
             "libex_mlx-v0.1.0-mlx-0.32.2-nif-#{nif}-x86_64-unknown-linux-gnu.so.tar.gz"

    [cpu | _] = :erlang.system_info(:system_architecture) |> List.to_string() |> String.split("-")
    assert String.starts_with?(Precompiled.target(), cpu)
  end

  test "the checksum file round-trips and keeps other targets' entries", %{tmp_dir: dir} do
    path = Precompiled.checksum_path(dir)
    assert Precompiled.read_checksums(path) == %{}
    Precompiled.write_checksums!(path, %{"a.tar.gz" => "sha256:01"})
    Precompiled.write_checksums!(path, %{"b.tar.gz" => "sha256:02"})

    assert Precompiled.read_checksums(path) == %{
             "a.tar.gz" => "sha256:01",
             "b.tar.gz" => "sha256:02"
           }
  end
end
