"""The app's session keys, every one named here: what a session keeps besides its widgets' values, and the widget
keys read outside their widget. ``own(key)`` tells the two apart: a live class publishes and applies a teacher's
settings (widget keys) and never the app's own keys, so the rule is written once, here, not read off a key's
spelling."""

from dataclasses import dataclass

# What the app keeps in a session.
SESSION_ID = "session id"              # str: this session to the server's shared things (``session.session_id``)
MODEL_CHOICE = "model choice"          # ModelChoice: the sidebar's model (``classroom.model_choice``)
SESSION_MODELS = "session models"      # dict label -> store id: this session's trained and uploaded models
SELECT_MODEL = "select model"          # str: the label the sidebar selects on its next run
URL_NOTES = "url notes"                # list[str]: why a link's settings were changed, shown once
REFUSED_UPLOADS = "refused uploads"    # dict digest -> why: a refused file left in the uploader is not read again
TRAIN_TEXT = "train text"              # (file name, digest, text): the Train page's last valid upload
LAST_TRAINED = "last trained"          # dict: the Train page's last result, drawn again after the training
BAR_GUESS = "bar guess"                # str: the Train page's prediction before a preset run
SAE_TRAINED = "sae trained"            # str: the store id of the SAE just trained, put in the page's id box next run
ROOM = "room state"                    # RoomState: this session's place in a live class (``live.membership``)

# Presentation and reading mode (``page.slides``).
PRESENT = "present"      # the URL's ?present=true (or =1) and the toggle's key
READ = "read"            # the URL's ?read=true: reading mode, every answer drawn at once
PART = "part"            # the URL key of the part shown in presentation mode
SUB = "slide"            # the session's slide within that part: a setting a teacher's view carries
COUNTS = "slide counts"  # part title -> how many slides it drew last (Next's callback runs before the part draws)

# Families: one key per question, per stored model.
@dataclass(frozen=True)
class Family:
    """Keys ``prefix + name``, one per question (or stored model): ``own`` knows them by their prefix."""

    prefix: str
    holds: str  # what each key holds, for the reader

    def __call__(self, name: str) -> str:
        return self.prefix + name


reveal = Family("reveal ", "bool: the question is revealed in this session")
guess = Family("guess ", "the widget holding this session's answer to the question")
asked = Family("asked ", "(text, options) of the question last asked under this key: another starts unrevealed")
predict = Family("predict ", "the radio of a predict-then-reveal or predict-then-run question")
exercise = Family("exercise ", "the answer box of an exercise")
pin = Family("pin ", "the teacher's pin toggle of the stored model with this id")


_OWN = {SESSION_ID, MODEL_CHOICE, SESSION_MODELS, SELECT_MODEL, URL_NOTES, REFUSED_UPLOADS, TRAIN_TEXT, LAST_TRAINED,
        BAR_GUESS, SAE_TRAINED, ROOM, COUNTS}
_FAMILIES = tuple(family.prefix for family in (reveal, guess, asked, predict, exercise, pin))

# Widget keys read outside their widget (each is also its URL name).
SEED = "seed"
MODEL = "model"
PROMPT = "prompt"
EXAMPLE = "example"
PHASE_STEP = "c_step"                  # the phase change's step slider, read by the part before it
ROOM_FOLLOW = "room follow"            # a student's Follow the teacher toggle
ROOM_NAME = "room name"                # a student's name in the class
ROOM_SHOW_JOIN = "room show join"      # the teacher's Show the join code toggle
_OWN_WIDGETS = {ROOM_FOLLOW, ROOM_NAME, ROOM_SHOW_JOIN}  # the live class's own widgets: never a teacher's setting


def own(key: object) -> bool:
    """``key`` is the app's own (or a live class widget's), not a page setting a teacher's view carries."""
    return not isinstance(key, str) or key in _OWN or key in _OWN_WIDGETS or key.startswith(_FAMILIES)
