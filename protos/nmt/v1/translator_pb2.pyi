from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    PRIORITY_INTERACTIVE: _ClassVar[Priority]
    PRIORITY_BULK: _ClassVar[Priority]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_END_OF_SENTENCE: _ClassVar[StopReason]
    STOP_REASON_LENGTH_LIMIT: _ClassVar[StopReason]
PRIORITY_UNSPECIFIED: Priority
PRIORITY_INTERACTIVE: Priority
PRIORITY_BULK: Priority
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_END_OF_SENTENCE: StopReason
STOP_REASON_LENGTH_LIMIT: StopReason

class DecodingOptions(_message.Message):
    __slots__ = ("beam_size", "length_penalty", "max_output_tokens", "num_hypotheses", "return_scores", "return_attention", "no_sentence_split")
    BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    RETURN_SCORES_FIELD_NUMBER: _ClassVar[int]
    RETURN_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    NO_SENTENCE_SPLIT_FIELD_NUMBER: _ClassVar[int]
    beam_size: int
    length_penalty: float
    max_output_tokens: int
    num_hypotheses: int
    return_scores: bool
    return_attention: bool
    no_sentence_split: bool
    def __init__(self, beam_size: _Optional[int] = ..., length_penalty: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., num_hypotheses: _Optional[int] = ..., return_scores: _Optional[bool] = ..., return_attention: _Optional[bool] = ..., no_sentence_split: _Optional[bool] = ...) -> None: ...

class TranslateRequest(_message.Message):
    __slots__ = ("texts", "source_lang", "target_lang", "model", "options", "request_id", "priority", "keep", "glossary", "glossary_name")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LANG_FIELD_NUMBER: _ClassVar[int]
    TARGET_LANG_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_FIELD_NUMBER: _ClassVar[int]
    GLOSSARY_NAME_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    source_lang: str
    target_lang: str
    model: str
    options: DecodingOptions
    request_id: str
    priority: Priority
    keep: _containers.RepeatedScalarFieldContainer[str]
    glossary: _containers.RepeatedCompositeFieldContainer[GlossaryEntry]
    glossary_name: str
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., source_lang: _Optional[str] = ..., target_lang: _Optional[str] = ..., model: _Optional[str] = ..., options: _Optional[_Union[DecodingOptions, _Mapping]] = ..., request_id: _Optional[str] = ..., priority: _Optional[_Union[Priority, str]] = ..., keep: _Optional[_Iterable[str]] = ..., glossary: _Optional[_Iterable[_Union[GlossaryEntry, _Mapping]]] = ..., glossary_name: _Optional[str] = ...) -> None: ...

class GlossaryEntry(_message.Message):
    __slots__ = ("source", "target")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ...) -> None: ...

class Hypothesis(_message.Message):
    __slots__ = ("text", "score", "source_pieces", "target_pieces", "attention", "num_tokens", "stop_reason")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PIECES_FIELD_NUMBER: _ClassVar[int]
    TARGET_PIECES_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    text: str
    score: float
    source_pieces: _containers.RepeatedScalarFieldContainer[str]
    target_pieces: _containers.RepeatedScalarFieldContainer[str]
    attention: _containers.RepeatedScalarFieldContainer[float]
    num_tokens: int
    stop_reason: StopReason
    def __init__(self, text: _Optional[str] = ..., score: _Optional[float] = ..., source_pieces: _Optional[_Iterable[str]] = ..., target_pieces: _Optional[_Iterable[str]] = ..., attention: _Optional[_Iterable[float]] = ..., num_tokens: _Optional[int] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class Segment(_message.Message):
    __slots__ = ("source", "start", "end", "hypotheses")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    source: str
    start: int
    end: int
    hypotheses: _containers.RepeatedCompositeFieldContainer[Hypothesis]
    def __init__(self, source: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., hypotheses: _Optional[_Iterable[_Union[Hypothesis, _Mapping]]] = ...) -> None: ...

class Translation(_message.Message):
    __slots__ = ("hypotheses", "segments")
    HYPOTHESES_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    hypotheses: _containers.RepeatedCompositeFieldContainer[Hypothesis]
    segments: _containers.RepeatedCompositeFieldContainer[Segment]
    def __init__(self, hypotheses: _Optional[_Iterable[_Union[Hypothesis, _Mapping]]] = ..., segments: _Optional[_Iterable[_Union[Segment, _Mapping]]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class TranslateResponse(_message.Message):
    __slots__ = ("translations", "model", "request_id", "error", "pivot_lang", "pivot_model")
    TRANSLATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PIVOT_LANG_FIELD_NUMBER: _ClassVar[int]
    PIVOT_MODEL_FIELD_NUMBER: _ClassVar[int]
    translations: _containers.RepeatedCompositeFieldContainer[Translation]
    model: str
    request_id: str
    error: Error
    pivot_lang: str
    pivot_model: str
    def __init__(self, translations: _Optional[_Iterable[_Union[Translation, _Mapping]]] = ..., model: _Optional[str] = ..., request_id: _Optional[str] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., pivot_lang: _Optional[str] = ..., pivot_model: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "pairs", "device", "variant", "max_texts_per_request", "max_chars_per_text", "max_tokens_per_text", "max_beam_size", "max_output_tokens", "max_sentences_per_request", "max_tokens_per_request", "device_resident")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    MAX_TEXTS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_PER_TEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_TEXT_FIELD_NUMBER: _ClassVar[int]
    MAX_BEAM_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_SENTENCES_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    DEVICE_RESIDENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    pairs: _containers.RepeatedScalarFieldContainer[str]
    device: str
    variant: str
    max_texts_per_request: int
    max_chars_per_text: int
    max_tokens_per_text: int
    max_beam_size: int
    max_output_tokens: int
    max_sentences_per_request: int
    max_tokens_per_request: int
    device_resident: bool
    def __init__(self, name: _Optional[str] = ..., pairs: _Optional[_Iterable[str]] = ..., device: _Optional[str] = ..., variant: _Optional[str] = ..., max_texts_per_request: _Optional[int] = ..., max_chars_per_text: _Optional[int] = ..., max_tokens_per_text: _Optional[int] = ..., max_beam_size: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., max_sentences_per_request: _Optional[int] = ..., max_tokens_per_request: _Optional[int] = ..., device_resident: _Optional[bool] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "pivots")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    PIVOTS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    pivots: _containers.RepeatedCompositeFieldContainer[PivotRoute]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., pivots: _Optional[_Iterable[_Union[PivotRoute, _Mapping]]] = ...) -> None: ...

class PivotRoute(_message.Message):
    __slots__ = ("pair", "via", "first_model", "second_model")
    PAIR_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    FIRST_MODEL_FIELD_NUMBER: _ClassVar[int]
    SECOND_MODEL_FIELD_NUMBER: _ClassVar[int]
    pair: str
    via: str
    first_model: str
    second_model: str
    def __init__(self, pair: _Optional[str] = ..., via: _Optional[str] = ..., first_model: _Optional[str] = ..., second_model: _Optional[str] = ...) -> None: ...
