"""The ``arith`` task's prompt text: the teacher's request, the student's instruction and the
teacher's fixed few-shot examples."""

TEACHER_SYSTEM = "You write arithmetic problems."
TEACHER_INSTRUCTION = "Write one new arithmetic problem: numbers with + - * / and brackets, on one line."
TEACHER_CLOSING = "Now write a new, different problem."
STUDENT_INSTRUCTION = "Answer with a number."
EXAMPLES = (
    "7 + 5",
    "9 - 4",
    "6 * 3",
    "(3 + 4) * 2",
    "12 - 9 + 2",
    "15 / 3",
    "8 * 7 - 6",
    "25 + 48",
    "(9 - 5) * (2 + 1)",
    "4 * 11",
)
"""Teacher few-shot examples (drawn ``num_examples`` at a time), from easy to a little harder."""
