"""Serve an llmflow ResponsesAgent with MLflow's own AgentServer (`mlflow.genai.agent_server`).

    python -m llmflow.mlflow.agent_server models:/assistant/1 --port 8000

MLflow's server answers `POST /invocations` and `POST /responses` (OpenAI's `client.responses`),
streaming with `"stream": true`, and traces each call. It runs one request at a time on its
event loop; `llmflow serve` serves the same model with the same wire format and batches
concurrent requests.
"""

from __future__ import annotations

import argparse
from collections.abc import Generator
from typing import Any


def agent_server_app(model_uri: str) -> Any:
    """MLflow's AgentServer app around the ResponsesAgent logged at `model_uri`. MLflow keeps one
    invoke and one stream function per process, so call this once."""
    import mlflow
    from mlflow.genai.agent_server import AgentServer, invoke, stream
    from mlflow.types.responses import (
        ResponsesAgentRequest,
        ResponsesAgentResponse,
        ResponsesAgentStreamEvent,
    )

    from llmflow.mlflow.model import unwrap_python_model
    from llmflow.mlflow.responses_agent import LlmflowResponsesAgent

    agent = unwrap_python_model(mlflow.pyfunc.load_model(model_uri))
    if not isinstance(agent, LlmflowResponsesAgent):
        raise SystemExit(f"{model_uri} is not an llmflow ResponsesAgent: log it with interface='responses'")

    @invoke()
    def answer(request: ResponsesAgentRequest) -> ResponsesAgentResponse:
        return agent.predict(request)

    @stream()
    def answer_stream(request: ResponsesAgentRequest) -> Generator[ResponsesAgentStreamEvent, None, None]:
        yield from agent.predict_stream(request)

    return AgentServer("ResponsesAgent").app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_uri")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    uvicorn.run(agent_server_app(args.model_uri), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
