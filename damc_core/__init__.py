"""DAMC core: decision-aware memory cards for tool-calling agents, with no framework imports."""

from .assemble import Assembler, DefaultAssembler, valid_sequence
from .compress import Compressor, Summarizer, SummarizingCompressor, TemplateCompressor
from .encode import DefaultEncoder, Encoder, ToolCall
from .errors import (
    ConfigError,
    DamcError,
    RecordExistsError,
    SchemaVersionError,
    StoreClosedError,
    StoreError,
    TokenizerUnavailableError,
    TraceError,
)
from .explain import explain
from .memory import RECALL_TOOL, DecisionMemory, MemorySettings, checked_budget
from .select import HybridSelector, Selection, Selector, Supersession, ThresholdSelector, TopKSelector
from .stores import InMemoryStore, MemoryStore, SQLiteStore
from .tokens import CharEstimateCounter, TiktokenCounter, TokenCounter, load_encoding
from .types import (
    BuiltContext,
    Card,
    CardKind,
    Decision,
    DecisionFocus,
    Fact,
    Message,
    Namespace,
    RawRecord,
    Score,
    ScoredCard,
    Table,
)
from .value import Decay, HeuristicValuator, TaskMode, ValuationContext, Valuator, WeightedValuators

__all__ = [
    "RECALL_TOOL",
    "Assembler",
    "BuiltContext",
    "Card",
    "CardKind",
    "CharEstimateCounter",
    "Compressor",
    "ConfigError",
    "DamcError",
    "Decay",
    "Decision",
    "DecisionFocus",
    "DecisionMemory",
    "DefaultAssembler",
    "DefaultEncoder",
    "Encoder",
    "Fact",
    "HeuristicValuator",
    "HybridSelector",
    "InMemoryStore",
    "MemorySettings",
    "MemoryStore",
    "Message",
    "Namespace",
    "RawRecord",
    "RecordExistsError",
    "SQLiteStore",
    "SchemaVersionError",
    "Score",
    "ScoredCard",
    "Selection",
    "Selector",
    "StoreClosedError",
    "StoreError",
    "Summarizer",
    "SummarizingCompressor",
    "Supersession",
    "Table",
    "TaskMode",
    "TemplateCompressor",
    "ThresholdSelector",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerUnavailableError",
    "ToolCall",
    "TopKSelector",
    "TraceError",
    "ValuationContext",
    "Valuator",
    "WeightedValuators",
    "checked_budget",
    "explain",
    "load_encoding",
    "valid_sequence",
]
