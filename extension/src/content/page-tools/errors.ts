// A tool failed in a way the model can act on: the message goes back to it as the tool's result.

export class ToolFailure extends Error {
  override name = "ToolFailure";
}
