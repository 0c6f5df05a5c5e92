// The scaling calculator of chapter 7 ("How far data parallelism scales").
// The four functions below are four of that page's "scaling model" block, line for line (its
// fifth, DDP's bucket copy, is left out), so that the calculator and the table printed by the
// block always agree (site_tests/site/test_browser.py runs the block's Python and compares). Inputs are read in the units people quote: GB/s and TFLOP/s.

(() => {
  // Ring all-reduce: each GPU moves 2(p-1)/p of the gradient bytes at the bus bandwidth.
  function allreduceSeconds(gradBytes, world, busBytesPerS) {
    return ((2 * (world - 1)) / world) * gradBytes / busBytesPerS;
  }

  // Forward plus backward of a dense model: 6 FLOPs per parameter per token.
  function stepComputeSeconds(params, tokens, flopsPerS) {
    return (6 * params * tokens) / flopsPerS;
  }

  // Backward alone: 4 of those 6 FLOPs, two thirds of the step.
  function backwardSeconds(params, tokens, flopsPerS) {
    return (4 * params * tokens) / flopsPerS;
  }

  // bf16 weights and gradients (2 + 2), fp32 master weights and Adam's two moments (4 + 4 + 4).
  function trainingStateBytes(params) {
    return (2 + 2 + 4 + 4 + 4) * params;
  }

  function scalingModel({ params, bytesPerGrad, gpus, busGBps, tflops, tokens }) {
    const allreduce = allreduceSeconds(params * bytesPerGrad, gpus, busGBps * 1e9);
    const step = stepComputeSeconds(params, tokens, tflops * 1e12);
    const backward = backwardSeconds(params, tokens, tflops * 1e12);
    return {
      allreduce,
      step,
      backward,
      ratioStep: allreduce / step,
      ratioBackward: allreduce / backward,
      hidden: allreduce <= backward,
      stateBytes: trainingStateBytes(params),
    };
  }

  function readInputs(form) {
    const values = {};
    for (const input of form.querySelectorAll("input[name]")) {
      const value = Number(input.value);
      const valid = input.value.trim() !== "" && Number.isFinite(value) && value > 0;
      const integer = input.name !== "gpus" || Number.isInteger(value);
      input.setAttribute("aria-invalid", String(!(valid && integer)));
      if (!(valid && integer)) return null;
      values[input.name] = value;
    }
    return values;
  }

  function formatMs(seconds) {
    const ms = seconds * 1e3;
    return `${ms.toLocaleString("en-US", { maximumFractionDigits: ms < 10 ? 2 : 1 })} ms`;
  }

  function render(form) {
    const inputs = readInputs(form);
    const shown = (name, value, text) => {
      const output = form.querySelector(`output[name="${name}"]`);
      output.textContent = text;
      if (value === null) output.removeAttribute("data-value");
      else output.dataset.value = String(value);
    };
    if (inputs === null) {
      for (const output of form.querySelectorAll("output")) shown(output.name, null, "–");
      form.querySelector("[data-calculator-message]").textContent =
        "Every input must be a positive number (the GPUs a whole one).";
      return;
    }
    form.querySelector("[data-calculator-message]").textContent = "";
    const model = scalingModel(inputs);
    shown("allreduce", model.allreduce, formatMs(model.allreduce));
    shown("step", model.step, formatMs(model.step));
    shown("backward", model.backward, formatMs(model.backward));
    shown("ratio-step", model.ratioStep, `${(100 * model.ratioStep).toFixed(1)} %`);
    shown("ratio-backward", model.ratioBackward, `${(100 * model.ratioBackward).toFixed(1)} %`);
    shown(
      "hidden",
      model.hidden ? 1 : 0,
      model.hidden ? "yes: it fits inside backward" : "no: it outlasts backward",
    );
    shown("state", model.stateBytes, `${(model.stateBytes / 1e9).toFixed(1)} GB`);
  }

  // document$ is Material's page-load stream: first load and every instant navigation.
  document$.subscribe(({ body }) => {
    for (const form of body.querySelectorAll("form[data-scaling-calculator]")) {
      if (form.dataset.calculatorReady) continue;
      form.dataset.calculatorReady = "true";
      form.addEventListener("input", () => render(form));
      form.addEventListener("submit", (event) => event.preventDefault());
      render(form);
    }
  });
})();
