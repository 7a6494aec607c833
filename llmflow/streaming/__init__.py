"""Engine-independent streaming: detokenization, stop strings, finish reasons and usage.

Standard library only; every engine's token ids pass through here.
"""

from llmflow.streaming.detokenizer import ByteDetokenizer, Detokenizer
from llmflow.streaming.generation import stream_chunks
from llmflow.streaming.stops import StopMatcher

__all__ = ["ByteDetokenizer", "Detokenizer", "StopMatcher", "stream_chunks"]
