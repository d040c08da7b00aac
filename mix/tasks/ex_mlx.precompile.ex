defmodule Mix.Tasks.ExMlx.Precompile do
  @shortdoc "Packs the built NIF as a precompiled artifact and records its checksum"
  @moduledoc """
  For maintainers publishing precompiled NIFs (see `ExMLX.Build.Precompiled`
  in `mix/ex_mlx_precompiled.ex`): builds the NIF from source for this
  machine (`MIX_ENV=prod`), packs it as
  `_build/ex_mlx-precompiled/<artifact>` and adds the artifact's SHA-256 to
  `checksum-ExMLX.Native.exs`. Run it on each target, publish the artifacts
  at the base URL, commit the checksum file.

      MIX_ENV=prod EXMLX_BUILD=true mix ex_mlx.precompile
  """
  use Mix.Task

  alias ExMLX.Build
  alias ExMLX.Build.Precompiled

  @impl true
  def run(_args) do
    if System.get_env("EXMLX_BUILD") not in ["1", "true"] or Mix.env() != :prod,
      do: Mix.raise("run it as: MIX_ENV=prod EXMLX_BUILD=true mix ex_mlx.precompile")

    Mix.Task.run("compile", [])
    library = Path.join(Build.priv_native_dir(), Build.priv_lib_file())
    artifact = Mix.Tasks.Compile.ExMlxNative.artifact()
    {path, sha256} = Precompiled.pack!(library, artifact, Build.precompiled_dir())
    Precompiled.write_checksums!(Precompiled.checksum_path(Build.root()), %{artifact => sha256})
    Mix.shell().info("#{path}\n#{sha256}")
  end
end
