"""llmflow's HTTP server: OpenAI-compatible streaming routes and MLflow's /invocations, for
llmflow models or any MLflow pyfunc model, one or several per server.

    from llmflow.server import create_app, load_served, ServerSettings
    app = create_app(load_served("models:/chat/1"), ServerSettings(max_queue=8))
"""

from llmflow.server.app import create_app
from llmflow.server.model_config import ModelConfig
from llmflow.server.served import ServedModel, load_served
from llmflow.server.settings import ServerSettings

__all__ = ["ModelConfig", "ServedModel", "ServerSettings", "create_app", "load_served"]
