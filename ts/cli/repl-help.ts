/** The help texts of the interactive chat (`/?`, `/? set`, `/? show`, `/? shortcuts`, `/set parameter`), worded as Ollama's. */

export const HELP = `Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /image <path> [question]  Attach an image (and ask)
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use """ to begin a multi-line message.
`;

export const HELP_SET = `Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set history           Enable history
  /set nohistory         Disable history
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
`;

export const HELP_SHOW = `Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template
`;

export const HELP_KEYS = `Available keyboard shortcuts:
  Ctrl + c            Stop the answer; on an empty line, how to leave
  Ctrl + d            Exit (on an empty line)
  Up / Down           Walk the history
  Ctrl + a / Ctrl + e Move to the beginning / end of the line
  Ctrl + u / Ctrl + k Delete to the beginning / end of the line
  Ctrl + w            Delete the word before the cursor
  Ctrl + l            Clear the screen
`;

export const HELP_PARAMETER = `Available Parameters:
  /set parameter seed <int>             Random number seed
  /set parameter num_predict <int>      Max number of tokens to predict
  /set parameter top_k <int>            Pick from top k num of tokens
  /set parameter top_p <float>          Pick token based on sum of probabilities
  /set parameter min_p <float>          Pick token based on top token probability * min_p
  /set parameter num_ctx <int>          Set the context size
  /set parameter temperature <float>    Set creativity level
  /set parameter repeat_penalty <float> How strongly to penalize repetitions
  /set parameter repeat_last_n <int>    Set how far back to look for repetitions
  /set parameter stop <string> <string> ...   Set the stop parameters
`;
