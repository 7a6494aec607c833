"""The Responses format (OpenAI's Responses API, MLflow's ResponsesAgent): reading a request
(`request.py`) and building the events and objects of an answer (`events.py`). Standard
library and llmflow's own types only: MLflow and HTTP use it, it knows neither."""
