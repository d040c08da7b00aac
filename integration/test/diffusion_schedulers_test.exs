if Code.ensure_loaded?(Bumblebee) do
  defmodule ExMLX.Integration.DiffusionSchedulersTest do
    # Bumblebee's diffusion schedulers for their whole timestep loop, as
    # Stable Diffusion runs them: one defn `while` over the timesteps tensor
    # (each timestep a slice of it, squeezed to a scalar), a stand-in model
    # reading that timestep, every step's sample recorded. ExMLX with
    # ExMLX.Compiler against Nx.BinaryBackend with Nx's Evaluator, step by
    # step. (On another MLX backend, a timestep read after slice → squeeze
    # came back as two neighbouring values read as one, and Stable Diffusion
    # drifted; this is the regression test for that class of bug.)
    use ExUnit.Case, async: false

    defmodule Loop do
      import Nx.Defn

      defn run(latents, key, opts \\ []) do
        # (the scheduler's functions come as closures, as Stable Diffusion
        # passes them: Bumblebee's scheduler_init/step are not defn)
        opts = keyword!(opts, [:init, :step])
        {state, timesteps} = opts[:init].(latents, key)

        trace = trace_buffer(latents, timesteps)

        {_latents, _state, trace, _i} =
          while {latents, state, trace, i = 0}, timestep <- timesteps do
            # a stand-in for the denoising model: depends on the timestep
            prediction = latents * 0.5 + Nx.sin(timestep / 100)

            {state, latents} = opts[:step].(state, latents, prediction)

            trace = Nx.put_slice(trace, [i, 0, 0, 0], Nx.new_axis(latents, 0))
            {latents, state, trace, i + 1}
          end

        {trace, timesteps}
      end

      deftransformp trace_buffer(latents, timesteps) do
        shape = Tuple.insert_at(Nx.shape(latents), 0, Nx.axis_size(timesteps, 0))
        Nx.broadcast(Nx.tensor(0.0, type: Nx.type(latents)), shape)
      end
    end

    defp run(backend, compiler, scheduler, steps, type \\ :f32) do
      Nx.with_default_backend(backend, fn ->
        key = Nx.Random.key(42)
        {latents, _} = Nx.Random.normal(Nx.Random.key(7), shape: {16, 16, 4})
        latents = Nx.as_type(latents, type)

        init = &Bumblebee.scheduler_init(scheduler, steps, &1, &2)
        step = &Bumblebee.scheduler_step(scheduler, &1, &2, &3)
        run = Nx.Defn.jit(&Loop.run(&1, &2, init: init, step: step), compiler: compiler)

        {trace, timesteps} = run.(latents, key)
        {Nx.backend_copy(trace, Nx.BinaryBackend), Nx.backend_copy(timesteps, Nx.BinaryBackend)}
      end)
    end

    for {module, steps} <- [
          {Bumblebee.Diffusion.PndmScheduler, 20},
          {Bumblebee.Diffusion.DdimScheduler, 20},
          {Bumblebee.Diffusion.LcmScheduler, 4}
        ] do
      test "#{inspect(module)}: every step's sample matches Nx.BinaryBackend" do
        scheduler = Bumblebee.configure(unquote(module))
        {ours, our_timesteps} = run(ExMLX.Backend, ExMLX.Compiler, scheduler, unquote(steps))
        {theirs, timesteps} = run(Nx.BinaryBackend, Nx.Defn.Evaluator, scheduler, unquote(steps))
        assert our_timesteps == timesteps

        # the same loop in f64 on Nx.BinaryBackend: the exact trajectory, to
        # tell rounding from error
        {exact, _} = run(Nx.BinaryBackend, Nx.Defn.Evaluator, scheduler, unquote(steps), :f64)
        scale = theirs |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number() |> max(1.0)

        distance = fn a, b ->
          Nx.subtract(a, b) |> Nx.abs() |> Nx.reduce_max() |> Nx.to_number()
        end

        for step <- 0..(Nx.axis_size(theirs, 0) - 1) do
          at = "step #{step} (timestep #{Nx.to_number(timesteps[step])})"
          difference = distance.(ours[step], theirs[step])
          assert difference <= 1.0e-5 * scale, "#{at}: #{difference} from Nx.BinaryBackend"

          # ExMLX's f32 rounding is of the order of Nx.BinaryBackend's own
          our_error = distance.(ours[step], exact[step])
          their_error = distance.(theirs[step], exact[step])
          assert our_error <= 10 * their_error + 1.0e-6 * scale, "#{at}: #{our_error} from f64"
        end
      end
    end
  end
end
