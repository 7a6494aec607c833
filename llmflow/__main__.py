from llmflow.cli import app

app()
