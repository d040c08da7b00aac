defmodule ExMLX.Integration.NotebooksTest do
  # Every notebook in the repository's notebooks/ runs, cell by cell, as a
  # user would run it in Livebook (its Mix.install cell replaced by this
  # project's dependencies), when those dependencies are the versions its
  # Mix.install cell asks for (ExMLX.Integration.Requirements): a notebook
  # for Nx 0.12 runs where this project is built with Nx 0.12. A notebook
  # for other versions, or needing a package this project lacks, is
  # skipped, and says so.
  use ExUnit.Case, async: false

  alias ExMLX.Integration.{Notebook, Requirements}

  @moduletag timeout: 600_000
  @notebooks Path.wildcard(Path.expand("../../notebooks/*.livemd", __DIR__))

  test "the notebooks folder has notebooks" do
    assert length(@notebooks) >= 3
  end

  for path <- @notebooks do
    @path path
    test "#{Path.basename(path)} runs" do
      source = File.read!(@path)
      requirements = Requirements.check(Requirements.install_cell(@path), Requirements.packages())
      assert requirements.conflicts == []

      cond do
        requirements.mismatches != [] ->
          IO.puts(
            "\n#{Path.basename(@path)} skipped: " <>
              Enum.join(requirements.mismatches, "; ")
          )

        source =~ "{:bumblebee" and not Code.ensure_loaded?(Bumblebee) ->
          IO.puts("\n#{Path.basename(@path)} skipped: Bumblebee is not available")

        source =~ "{:bumblebee" ->
          # the hub is out of reach: the tiny GPT-2 of scripts/tiny_models.py,
          # whose word-level tokenizer reads "<s>" and "w4" … "w127"
          dir = ExMLX.Integration.tiny_models!()
          System.put_env("EXMLX_NOTEBOOK_MODEL", Path.join(dir, "gpt2"))
          System.put_env("EXMLX_NOTEBOOK_PROMPT", "<s> w17 w42 w99 w5")

          try do
            assert length(Notebook.run!(@path)) == length(Notebook.cells(@path)) - 1
          after
            System.delete_env("EXMLX_NOTEBOOK_MODEL")
            System.delete_env("EXMLX_NOTEBOOK_PROMPT")
          end

        true ->
          assert length(Notebook.run!(@path)) == length(Notebook.cells(@path)) - 1
      end
    end
  end
end
