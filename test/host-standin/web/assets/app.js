// ComfyUI stand-in frontend asset (served by the static web root).
export const standin = true;
