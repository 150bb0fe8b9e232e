"""llmscale: scale LLM inference replicas on leading signals."""

__version__ = "0.1.0"
