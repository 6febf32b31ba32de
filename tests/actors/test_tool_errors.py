"""Tool-argument errors in zod's words (``agents`` 0.17 validates tool input with zod 4).

Every expected problem text below is what ``z.fromJSONSchema(schema).safeParse(args)``
gives in zod 4.6.7 (the original's peer dependency is ``zod ^4.0.0``) for the
same raw schema, its issues joined ``"<path>: <message>"`` with ``"; "`` in
zod's order (the schema's property order). The project wraps them as
``Error: invalid arguments for <tool>: <problems>``.
"""

import pytest

from actors.context import ContextBlocks, search_provider_for
from actors.skills import DirectorySkillProvider
from actors.tools import Tool, search_context_schema, set_context_schema, skill_schema

pytestmark = pytest.mark.both_storages

SCHEMAS = {
    "set4": set_context_schema(["memory", "notes", "skills", "knowledge"], ["skills", "knowledge"]),
    "set1": set_context_schema(["memory"], []),
    "load1": skill_schema(["skills"], "load"),
    "load2": skill_schema(["skills", "more"], "load"),
    "search1": search_context_schema(["knowledge"]),
    "session": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"}},
                "required": ["query"]},
}

ZOD = [
    ('set4', {'content': 'x'},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"'),
    ('set4', {'label': 'memory', 'content': 'x', 'action': None},
     'action: Invalid option: expected one of "replace"|"append"'),
    ('set4', {'label': 42, 'content': 'x'},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"'),
    ('set4', {'label': None, 'content': 'x'},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"'),
    ('set4', {'label': 'soul', 'content': 'x'},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"'),
    ('set4', {},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"; content: Invalid input: expected string, received undefined'),
    ('set4', {'label': 5, 'content': None},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"; content: Invalid input: expected string, received null'),
    ('set4', {'action': 5, 'metadata': {'title': 5}, 'content': 3},
     'label: Invalid option: expected one of "memory"|"notes"|"skills"|"knowledge"; content: Invalid input: expected string, received number; action: Invalid option: expected one of "replace"|"append"; metadata.title: Invalid input: expected string, received number'),
    ('set4', {'label': 'skills', 'content': 'x', 'metadata': {'title': 5, 'description': None}},
     'metadata.title: Invalid input: expected string, received number; metadata.description: Invalid input: expected string, received null'),
    ('set4', {'label': 'memory', 'content': 'x', 'metadata': [1]},
     'metadata: Invalid input: expected object, received array'),
    ('set4', None,
     'Invalid input: expected object, received null'),
    ('set4', 'memory',
     'Invalid input: expected object, received string'),
    ('set4', [1, 2],
     'Invalid input: expected object, received array'),
    ('set1', {'content': 'x'},
     'label: Invalid input: expected "memory"'),
    ('set1', {'label': 'soul', 'content': 'x'},
     'label: Invalid input: expected "memory"'),
    ('set1', {},
     'label: Invalid input: expected "memory"; content: Invalid input: expected string, received undefined'),
    ('load1', {'key': 'a'},
     'label: Invalid input: expected "skills"'),
    ('load1', {'label': 3, 'key': 'a'},
     'label: Invalid input: expected "skills"'),
    ('load1', {'label': 'memory', 'key': 'a'},
     'label: Invalid input: expected "skills"'),
    ('load1', {},
     'label: Invalid input: expected "skills"; key: Invalid input: expected string, received undefined'),
    ('load1', {'label': 'skills', 'key': 5},
     'key: Invalid input: expected string, received number'),
    ('load2', {'key': 'a'},
     'label: Invalid option: expected one of "skills"|"more"'),
    ('load2', {'label': None, 'key': None},
     'label: Invalid option: expected one of "skills"|"more"; key: Invalid input: expected string, received null'),
    ('search1', {'query': 'x'},
     'label: Invalid input: expected "knowledge"'),
    ('search1', {'label': 'nope'},
     'label: Invalid input: expected "knowledge"; query: Invalid input: expected string, received undefined'),
    ('search1', {'label': ['knowledge'], 'query': 1},
     'label: Invalid input: expected "knowledge"; query: Invalid input: expected string, received number'),
    ('session', {},
     'query: Invalid input: expected string, received undefined'),
    ('session', {'query': None},
     'query: Invalid input: expected string, received null'),
    ('session', {'query': True},
     'query: Invalid input: expected string, received boolean'),
]


async def _never_called(args):
    raise AssertionError("invalid arguments reached the handler")


@pytest.mark.parametrize("schema, args, problems", ZOD)
async def test_invalid_tool_arguments_are_reported_in_zods_words(schema, args, problems):
    tool = Tool("t", "", SCHEMAS[schema], _never_called)
    assert await tool.execute(args) == f"Error: invalid arguments for t: {problems}"


class Static:
    def __init__(self, value):
        self.value = value

    async def get(self):
        return self.value


async def test_the_session_tools_name_a_missing_or_mistyped_enum_field_by_its_options(storage, tmp_path):
    skills = DirectorySkillProvider(tmp_path / "skills")
    await skills.set("pirate", "Say arr.", "Talk like a pirate")
    session = (
        ContextBlocks(storage)
        .with_context("soul", provider=Static("You are a helpful assistant."))
        .with_context("memory", max_tokens=1100)
        .with_context("skills", provider=skills)
        .with_context("knowledge", provider=search_provider_for(storage))
    )
    tools = await session.tools()
    options = 'Invalid option: expected one of "memory"|"skills"|"knowledge"'
    assert await tools["set_context"].execute({"content": "x"}) == \
        f"Error: invalid arguments for set_context: label: {options}"
    assert await tools["set_context"].execute({"label": "memory", "content": "x", "action": None}) == \
        'Error: invalid arguments for set_context: action: Invalid option: expected one of "replace"|"append"'
    assert await tools["set_context"].execute({"label": 42, "content": "x"}) == \
        f"Error: invalid arguments for set_context: label: {options}"
    assert await tools["load_context"].execute({"label": "memory", "key": "pirate"}) == \
        'Error: invalid arguments for load_context: label: Invalid input: expected "skills"'
    assert await tools["search_context"].execute({"query": "x"}) == \
        'Error: invalid arguments for search_context: label: Invalid input: expected "knowledge"'
    assert await tools["load_context"].execute({"label": "skills", "key": "pirate"}) == "Say arr."
