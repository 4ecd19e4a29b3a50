"""Slack's Block Kit limits, and the share of them that agent text may use.

``slack_sdk.models`` checks most of these when ``to_dict()`` runs; the budgets are ours,
kept below what Slack refuses so a message never fails in Slack for its size.
"""

SECTION_TEXT_LIMIT = 3000
"""Characters in one section's text."""
HEADER_TEXT_LIMIT = 150
"""Characters in a header block."""
BUTTON_TEXT_LIMIT = 75
"""Characters on a button or a select option."""
MODAL_TITLE_LIMIT = 24
"""Characters in a modal's title, submit and close labels."""
INPUT_MAX_LENGTH = 3000
"""The longest value a ``plain_text_input`` accepts."""
FIELDS_LIMIT = 10
"""Fields in one section."""
FIELD_TEXT_LIMIT = 2000
"""Characters in one section field, an input's label or its hint."""
MODAL_BLOCK_LIMIT = 100
"""Blocks in a modal or the Home tab."""
MESSAGE_BLOCK_LIMIT = 50
"""Blocks in a message."""
MESSAGE_TEXT_BUDGET = 11_000
"""Characters a message's blocks may take: Slack refuses about 12-13k (``msg_blocks_too_long``)."""
MODAL_TEXT_BUDGET = 200_000
"""JSON characters a modal may take: Slack refuses a view over 250 kB."""
