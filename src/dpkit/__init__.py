"""dpkit: differentially private data analysis."""
from dpkit._errors import (
    BudgetExceededError,
    DPError,
    InternalError,
    InvalidParameterError,
    LedgerCorruptedError,
    PrivacyWarning,
    UnsupportedEventError,
)
from dpkit.guarantees import ApproxDP, NeighbourRelation, PureDP, ZCDP
