// Step-through figures: a [data-stepper] element holds one <figure> per step. Without
// JavaScript all of them stay visible, one under the other, so nothing is lost; with it, one is
// shown at a time and the Previous/Next buttons (or the arrow keys) move between them.
// document$ is Material's page-load stream: it fires on first load and on instant navigation.
document$.subscribe(({ body }) => {
  for (const stepper of body.querySelectorAll("[data-stepper]")) {
    const panels = [...stepper.querySelectorAll(":scope > figure")];
    const controls = stepper.querySelector(".fig-stepper__controls");
    const previous = stepper.querySelector("[data-stepper-prev]");
    const next = stepper.querySelector("[data-stepper-next]");
    const status = stepper.querySelector(".fig-stepper__status");
    if (panels.length < 2 || !controls || stepper.dataset.stepperReady) continue;
    stepper.dataset.stepperReady = "true";

    let current = 0;
    const show = (index) => {
      current = Math.max(0, Math.min(panels.length - 1, index));
      panels.forEach((panel, i) => {
        panel.hidden = i !== current;
      });
      previous.disabled = current === 0;
      next.disabled = current === panels.length - 1;
      // Panel 0 is the state before the first step.
      status.textContent = current === 0 ? "Start" : `Step ${current} of ${panels.length - 1}`;
      stepper.dataset.step = String(current);
    };

    previous.addEventListener("click", () => show(current - 1));
    next.addEventListener("click", () => show(current + 1));
    stepper.addEventListener("keydown", (event) => {
      if (event.key === "ArrowLeft") show(current - 1);
      else if (event.key === "ArrowRight") show(current + 1);
      else return;
      event.preventDefault();
    });
    controls.hidden = false;
    show(0);
  }
});
