defmodule ExMLX.Integration.NotebookRequirementsTest do
  # Every notebook's Mix.install cell names versions that resolve together:
  # each requirement checked against the mix.exs of the packages this
  # project builds with (Hex's, or the checkouts NX_PATH, AXON_PATH, …
  # name). A cell for other versions than these (a Bumblebee notebook on
  # Nx 0.12 where this project runs Nx 0.13) is checked where this project
  # is built with them; notebooks_test.exs runs it there.
  use ExUnit.Case, async: true

  alias ExMLX.Integration.Requirements

  doctest Requirements

  @notebooks Path.wildcard(Path.expand("../../notebooks/*.livemd", __DIR__))

  for path <- @notebooks do
    @path path
    test "#{Path.basename(path)}: its Mix.install cell resolves with the packages at hand" do
      cell = Requirements.install_cell(@path)
      # ExMLX is the one package named by path (it is not on Hex yet)
      assert for({app, :path} <- cell, do: app) == [:ex_mlx]
      %{mismatches: mismatches, conflicts: conflicts} = Requirements.check(cell, packages())
      assert conflicts == []

      if mismatches != [] do
        IO.puts("\n#{Path.basename(@path)} not checked here: " <> Enum.join(mismatches, "; "))
      end
    end
  end

  test "ExMLX admits Nx 0.12 and 0.13" do
    %{deps: deps} = Requirements.package(Path.expand("../..", __DIR__))
    requirement = Keyword.fetch!(deps, :nx)

    for version <- ["0.12.0", "0.12.1", "0.13.0", "0.13.1"],
        do: assert(Version.match?(version, requirement), version)

    for version <- ["0.11.0", "0.14.0", "1.0.0"],
        do: refute(Version.match?(version, requirement), version)
  end

  test "the Bumblebee notebook's former cell (Nx 0.13 with Bumblebee 0.7) is refused" do
    cell = [nx: "~> 0.13", bumblebee: "~> 0.7", ex_mlx: :path]
    packages = packages()
    %{mismatches: mismatches, conflicts: conflicts} = Requirements.check(cell, packages)
    nx = packages.nx.version

    cond do
      not Map.has_key?(packages, :bumblebee) ->
        IO.puts("\nBumblebee is not among this project's dependencies: not checked")

      Version.match?(nx, "~> 0.13") ->
        # Bumblebee 0.7.0's own requirement, from its mix.exs
        assert "bumblebee 0.7.0 requires nx ~> 0.12.0, and the cell's nx is #{nx}" in conflicts

      true ->
        assert mismatches == ["the cell asks for nx ~> 0.13; the package at hand is #{nx}"]
    end
  end

  @tag :tmp_dir
  test "a package's version and requirements are read from its mix.exs", %{tmp_dir: dir} do
    File.write!(Path.join(dir, "mix.exs"), ~S"""
    defmodule Sample.MixProject do
      use Mix.Project
      @version "1.2.3"
      @nx "~> 0.12.0 or ~> 0.13.0"
      def project, do: [app: :sample, version: @version, deps: deps()]

      defp deps do
        [
          {:nx, @nx},
          {:axon, "~> 0.8", optional: true},
          {:local, path: "../local"},
          {:bad, "not a requirement"}
        ] ++ more()
      end

      defp more, do: [{:polaris, "~> 0.1"}]
    end
    """)

    assert Requirements.package(dir) == %{
             version: "1.2.3",
             deps: [nx: "~> 0.12.0 or ~> 0.13.0", axon: "~> 0.8"]
           }
  end

  defp packages do
    packages = Requirements.packages()
    unless Map.has_key?(packages, :nx), do: flunk("Nx is not among this project's dependencies")
    packages
  end
end
